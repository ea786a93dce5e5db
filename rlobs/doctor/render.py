"""Render a doctor report: rich terminal output, Markdown, or JSON."""

from __future__ import annotations

import json

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rlobs.doctor.engine import Report
from rlobs.doctor.model import Finding, Rule, Severity

_STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def _steps(f: Finding) -> str:
    if f.first_step is None:
        return "-"
    return f"{f.first_step}" if f.last_step in (None, f.first_step) else f"{f.first_step}-{f.last_step}"


def to_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=True, default=str)


def to_markdown(report: Report) -> str:
    lines = [f"# rlobs doctor: run `{report.run_id}`", ""]
    if not report.findings:
        lines += ["No findings: every rule that had data found the run healthy.", ""]
    for i, f in enumerate(report.findings, 1):
        tag = f" (explained by `{f.explained_by}`)" if f.explained_by else ""
        lines += [f"## {i}. [{f.severity}] {f.title}{tag}", "",
                  f"- rule: `{f.rule}` · steps: {_steps(f)} · confidence: {f.confidence:.0%}",
                  f"- probable root cause: {f.root_cause}", f"- runbook: [{f.runbook}]({f.runbook})"]
        if len(f.chain) > 1 or f.explains:
            lines.append("- chain: " + " ← ".join(f.chain) + (f"; explains: {', '.join(f.explains)}" if f.explains else ""))
        lines += ["", "| evidence | observed | threshold | steps | note |", "|---|---|---|---|---|"]
        for e in f.evidence:
            steps = f"{e.steps[0]}-{e.steps[1]}" if e.steps else ""
            lines.append(f"| {e.metric} | {e.observed} | {'' if e.threshold is None else e.threshold} | {steps} | "
                         f"{e.note} |")
        lines += ["", "Remediation:", *[f"- `{r}`" if r.startswith("rlobs ") else f"- {r}" for r in f.remediation], ""]
    if report.insufficient:
        lines += ["## Insufficient data", "", *[f"- `{k}`: {v}" for k, v in sorted(report.insufficient.items())], ""]
    if report.errors:
        lines += ["## Rules that failed", "", *[f"- `{k}`: {v}" for k, v in sorted(report.errors.items())], ""]
    if report.record_problems:
        lines += ["## Record problems", "", *[f"- {p['kind']}: {p['problem']} ({p['detail']})"
                                              for p in report.record_problems], ""]
    return "\n".join(lines)


def print_report(report: Report, console: Console, verbose: bool = False) -> None:
    head = Text.assemble(("rlobs doctor ", "bold"), (report.run_id, "bold magenta"), f"  {report.path}")
    console.print(head)
    if not report.findings:
        console.print("[green]healthy:[/] no findings from the rules that had data")
    for i, f in enumerate(report.findings, 1):
        style = _STYLE[f.severity]
        title = Text.assemble((f"{i}. {str(f.severity).upper()} ", style), (f.title, "bold"))
        body = Table.grid(padding=(0, 1))
        body.add_column(style="dim", no_wrap=True)
        body.add_column()
        body.add_row("rule", f"{f.rule}   steps {_steps(f)}   confidence {f.confidence:.0%}")
        if f.explained_by:
            body.add_row("explained by", f.explained_by)
        body.add_row("root cause", f.root_cause)
        if len(f.chain) > 1:
            body.add_row("chain", " ← ".join(f.chain))
        if f.explains:
            body.add_row("explains", ", ".join(f.explains))
        for e in f.evidence:
            thr = f" (threshold {e.threshold})" if e.threshold is not None else ""
            st = f" steps {e.steps[0]}-{e.steps[1]}" if e.steps else ""
            body.add_row("evidence", f"{e.metric} = {e.observed}{thr}{st}" + (f"  [dim]{e.note}[/]" if e.note else ""))
        for r in f.remediation:
            body.add_row("do", f"[bold]{r}[/]" if r.startswith("rlobs ") else r)
        body.add_row("runbook", f.runbook)
        console.print(Panel(body, title=title, title_align="left", border_style=style))
    if report.insufficient and (verbose or not report.findings):
        t = Table(title="insufficient data (not judged)", show_edge=False)
        t.add_column("rule")
        t.add_column("why")
        for k, v in sorted(report.insufficient.items()):
            t.add_row(k, v)
        console.print(t)
    elif report.insufficient:
        console.print(f"[dim]{len(report.insufficient)} rule(s) had insufficient data "
                      f"({', '.join(sorted(report.insufficient))}); --verbose lists why[/]")
    for k, v in sorted(report.errors.items()):
        console.print(f"[red]rule {k} failed:[/] {v}")
    if report.record_problems:
        console.print(f"[yellow]{len(report.record_problems)} segment(s) not read in full; "
                      "`rlobs info` lists them[/]")
    counts = {s: sum(1 for f in report.findings if f.severity == s) for s in Severity}
    console.print(f"[dim]{counts[Severity.CRITICAL]} critical, {counts[Severity.WARNING]} warning, "
                  f"{counts[Severity.INFO]} info · {len(report.healthy)} rules healthy · {report.seconds:.2f} s[/]")


def rules_table(rules: dict[str, Rule]) -> Table:
    t = Table(title="doctor rules", show_edge=False)
    for col in ("rule", "concern", "needs", "thresholds", "title"):
        t.add_column(col)
    for r in rules.values():
        t.add_row(r.id, r.concern, ", ".join(r.needs), ", ".join(f"{k}={v:g}" for k, v in r.thresholds.items()),
                  r.title)
    return t
