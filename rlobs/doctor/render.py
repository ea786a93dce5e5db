"""Render a doctor report: rich terminal output, Markdown, or JSON."""

from __future__ import annotations

import json

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rlobs.doctor.engine import Report
from rlobs.doctor.model import Finding, Rule, Severity
from rlobs.textsafe import md, md_code, plain
from rlobs.textsafe import rich as esc

_STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def _steps(f: Finding) -> str:
    if f.first_step is None:
        return "-"
    return f"{f.first_step}" if f.last_step in (None, f.first_step) else f"{f.first_step}-{f.last_step}"


def to_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=True, default=str)


def to_markdown(report: Report) -> str:
    """Markdown in which every string from the record is literal text (no links, images, HTML or tables)."""
    lines = [f"# rlobs doctor: run {md_code(report.run_id)}", ""]
    if not report.findings:
        lines += ["No findings: every rule that had data found the run healthy.", ""]
    for i, f in enumerate(report.findings, 1):
        tag = f" (explained by {md_code(f.explained_by)})" if f.explained_by else ""
        lines += [f"## {i}. \\[{f.severity}\\] {md(f.title)}{tag}", "",
                  f"- rule: {md_code(f.rule)} · steps: {md(_steps(f))} · confidence: {f.confidence:.0%}",
                  f"- probable root cause: {md(f.root_cause)}", f"- runbook: [{md(f.runbook)}](<{f.runbook}>)"]  # a path from the rule, not the record
        if len(f.chain) > 1 or f.explains:
            lines.append("- chain: " + " ← ".join(md(c) for c in f.chain)
                         + (f"; explains: {', '.join(md(x) for x in f.explains)}" if f.explains else ""))
        lines += ["", "| evidence | observed | threshold | steps | note |", "|---|---|---|---|---|"]
        for e in f.evidence:
            steps = f"{e.steps[0]}-{e.steps[1]}" if e.steps else ""
            lines.append(f"| {md(e.metric)} | {md(e.observed)} | {'' if e.threshold is None else md(e.threshold)} | "
                         f"{md(steps)} | {md(e.note)} |")
        lines += ["", "Remediation:", *[f"- {md_code(r)}" if r.startswith("rlobs ") else f"- {md(r)}"
                                        for r in f.remediation], ""]
    if report.insufficient:
        lines += ["## Insufficient data", "", *[f"- {md_code(k)}: {md(v)}" for k, v in sorted(report.insufficient.items())],
                  ""]
    if report.errors:
        lines += ["## Rules that failed", "", *[f"- {md_code(k)}: {md(v)}" for k, v in sorted(report.errors.items())], ""]
    if report.record_problems:
        lines += ["## Record problems", "", *[f"- {md(p['kind'])}: {md(p['problem'])} ({md(p['detail'])})"
                                              for p in report.record_problems], ""]
    return "\n".join(lines)


def print_report(report: Report, console: Console, verbose: bool = False) -> None:
    """Rich output; strings from the record are escaped (no markup) and stripped of control characters."""
    head = Text.assemble(("rlobs doctor ", "bold"), (plain(report.run_id), "bold magenta"), f"  {plain(report.path)}")
    console.print(head)
    if not report.findings:
        console.print("[green]healthy:[/] no findings from the rules that had data")
    for i, f in enumerate(report.findings, 1):
        style = _STYLE[f.severity]
        title = Text.assemble((f"{i}. {str(f.severity).upper()} ", style), (plain(f.title), "bold"))
        body = Table.grid(padding=(0, 1))
        body.add_column(style="dim", no_wrap=True)
        body.add_column()
        body.add_row("rule", f"{esc(f.rule)}   steps {_steps(f)}   confidence {f.confidence:.0%}")
        if f.explained_by:
            body.add_row("explained by", esc(f.explained_by))
        body.add_row("root cause", esc(f.root_cause))
        if len(f.chain) > 1:
            body.add_row("chain", " ← ".join(esc(c) for c in f.chain))
        if f.explains:
            body.add_row("explains", ", ".join(esc(x) for x in f.explains))
        for e in f.evidence:
            thr = f" (threshold {esc(e.threshold)})" if e.threshold is not None else ""
            st = f" steps {e.steps[0]}-{e.steps[1]}" if e.steps else ""
            body.add_row("evidence", f"{esc(e.metric)} = {esc(e.observed)}{thr}{st}"
                         + (f"  [dim]{esc(e.note)}[/]" if e.note else ""))
        for r in f.remediation:
            body.add_row("do", f"[bold]{esc(r)}[/]" if r.startswith("rlobs ") else esc(r))
        body.add_row("runbook", esc(f.runbook))
        console.print(Panel(body, title=title, title_align="left", border_style=style))
    if report.insufficient and (verbose or not report.findings):
        t = Table(title="insufficient data (not judged)", show_edge=False)
        t.add_column("rule")
        t.add_column("why")
        for k, v in sorted(report.insufficient.items()):
            t.add_row(esc(k), esc(v))
        console.print(t)
    elif report.insufficient:
        console.print(f"[dim]{len(report.insufficient)} rule(s) had insufficient data "
                      f"({esc(', '.join(sorted(report.insufficient)))}); --verbose lists why[/]")
    for k, v in sorted(report.errors.items()):
        console.print(f"[red]rule {esc(k)} failed:[/] {esc(v)}")
    if report.record_problems:
        console.print(f"[yellow]{len(report.record_problems)} segment(s) or file(s) not read in full; "
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
