"""The ``rlobs`` command line (typer + rich).

    rlobs info RUN            kinds and counts, time span, processes, schema version, truncation
    rlobs info RUN --json     the same as JSON
    rlobs doctor RUN          ranked findings (exit 0 healthy / 1 warnings / 2 critical); --list-rules, --json
    rlobs import SOURCE PATH --out RUN   verl / openrlhf / trl / wandb / tensorboard logs -> a run record

Other commands (doctor, dashboards, observe, replay, import) register here as their issues land.
Heavy imports happen inside each command so ``rlobs --help`` stays fast.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from rlobs import exitcodes, textsafe

# click's UsageError as typer uses it (typer >= 0.25 vendors its own click; BadParameter is its public subclass)
_UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


class _Group(TyperGroup):
    """Typer's group with usage errors (unknown option, missing argument, bad value) exiting with
    ``exitcodes.USAGE`` instead of click's 2, which the doctor uses for "critical finding"."""

    def make_context(self, *args: Any, **kwargs: Any) -> typer.Context:
        try:
            return super().make_context(*args, **kwargs)
        except _UsageError as exc:
            exc.exit_code = exitcodes.USAGE
            raise

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _UsageError as exc:
            exc.exit_code = exitcodes.USAGE
            raise


app = typer.Typer(cls=_Group, add_completion=False, no_args_is_help=True,
                  help="rlobs: flight recorder and doctor for RL post-training of LLMs.")
console = Console()
err_console = Console(stderr=True)


def version() -> str:
    """The installed distribution's version (the package's own when run from a plain checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("rlobs")
    except PackageNotFoundError:
        from rlobs import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"rlobs {version()}\n")
        raise typer.Exit(exitcodes.OK)


@app.callback()
def _root(_version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                        help="print the version and exit")) -> None:
    """rlobs: flight recorder and doctor for RL post-training of LLMs."""


def fail(message: object, code: int = exitcodes.INPUT) -> typer.Exit:
    """Print ``error: MESSAGE`` on stderr and return the ``typer.Exit`` to raise.

    On a terminal the message is styled (its text escaped: record strings are never Rich markup); when
    stderr is a pipe or a file it is one plain line, never wrapped, so scripts and logs can grep it.
    """
    text = " ".join(textsafe.plain(message).split())  # control characters out, one line
    if err_console.is_terminal:
        err_console.print(f"[bold red]error:[/] {escape(text)}", soft_wrap=True, highlight=False)
    else:
        sys.stderr.write(f"error: {text}\n")
        sys.stderr.flush()
    return typer.Exit(code)


def _fmt_ts(ns: int | None) -> str:
    if ns is None:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _open(run: Path, verify: bool = False) -> Any:
    from rlobs.store import RunRecordError, open_run

    try:
        return open_run(run, verify=verify)
    except RunRecordError as exc:
        raise fail(exc, exitcodes.INPUT) from None


@app.command()
def info(run: Path = typer.Argument(..., help="run directory"),
         as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
         verify: bool = typer.Option(False, "--verify", help="check every sealed segment against the checksum its "
                                     "writer recorded (page checksums where there is none); corrupt ones are "
                                     "left out and listed")) -> None:
    """Summarise a run record: event kinds and counts, time span, processes, schema, damage."""
    with _open(run, verify) as record:
        data = record.info()
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        return
    esc = textsafe.rich  # every string below comes from the record: no markup, no terminal control codes
    console.print(f"[bold]run[/] {esc(data['run_id'])}  [dim]{esc(data['path'])}[/]")
    console.print(f"schema {esc(data['schema_version'])} · {data['events']:,} events · "
                  f"{_fmt_ts(data['first_ts_ns'])} → {_fmt_ts(data['last_ts_ns'])} ({data['duration_s']:.1f} s)")
    kinds = Table(title="events by kind", show_edge=False)
    kinds.add_column("kind")
    kinds.add_column("events", justify="right")
    for kind, n in sorted(data["kinds"].items(), key=lambda kv: -kv[1]):
        kinds.add_row(esc(kind), f"{n:,}")
    console.print(kinds)
    procs = Table(title="processes", show_edge=False)
    for col in ("process", "component", "rank", "host", "pid", "status", "events"):
        procs.add_column(col, justify="right" if col in ("rank", "pid", "events") else "left")
    for p in data["processes"]:
        style = {"lost": "red", "running": "yellow"}.get(p["status"], "")
        procs.add_row(esc(p["process"]), esc(p["component"]), esc(p["rank"]), esc(p["host"]), esc(p["pid"]),
                      f"[{style}]{esc(p['status'])}[/]" if style else esc(p["status"]), f"{p['events']:,}")
    console.print(procs)
    if data["problems"]:
        probs = Table(title="[red]segments not read in full[/]", show_edge=False)
        for col in ("kind", "problem", "rows read", "bytes unread", "file", "detail"):
            probs.add_column(col)
        for p in data["problems"]:
            probs.add_row(esc(p["kind"]), esc(p["problem"]), str(p["rows_read"]), str(p["bytes_unread"]),
                          esc(Path(p["path"]).name), esc(p["detail"], 160))
        console.print(probs)
        if data["truncated"]:
            console.print("[yellow]record has a truncated tail (a writer was killed): "
                          "everything before it was read[/]")
    else:
        console.print("[green]all segments read in full[/]")
    sums = data["checksums"]
    if data["verified"]:
        console.print(f"checksums verified: {sums['verified']:,} segment(s) match what their writer sealed"
                      + (f"; {sums['missing']:,} without a recorded checksum were read in full with page checksums"
                         if sums["missing"] else ""))
    else:
        console.print("[dim]checksums not verified (rlobs info --verify checks every sealed segment)[/]")


# --- explain (rlobs.failures) ---
@app.command()
def explain(failure_id: str = typer.Argument(None, metavar="ID", help="failure id (alert / doctor rule / runbook)"),
            as_json: bool = typer.Option(False, "--json", help="print as JSON"),
            list_ids: bool = typer.Option(False, "--list", help="list the failure ids")) -> None:
    """What one failure looks like end to end: metric -> panel -> alert -> doctor rule -> runbook."""
    from rlobs.failures import FAILURES, explain as explain_failure, explain_text

    if list_ids or not failure_id:
        for fid, f in sorted(FAILURES.items()):
            print(f"{fid:36} {f.severity:9} alert: {'yes, for ' + f.alert_for if f.alert else 'no':13} "
                  f"doctor: {'yes' if f.rule else 'no'}")
        return
    if failure_id not in FAILURES:
        raise fail(f"unknown failure id {failure_id!r}; `rlobs explain --list` lists them")
    if as_json:
        print(json.dumps(explain_failure(failure_id), indent=1))
    else:
        print(explain_text(failure_id))


# --- doctor (rlobs.doctor; imported lazily) ---
@app.command()
def doctor(run: Path = typer.Argument(None, help="run directory"),
           as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
           markdown: bool = typer.Option(False, "--markdown", help="print the report as Markdown"),
           list_rules: bool = typer.Option(False, "--list-rules", help="list the rules and their thresholds"),
           rule: list[str] = typer.Option(None, "--rule", help="run only this rule (repeatable)"),
           since_step: int = typer.Option(None, "--since-step", help="only judge steps >= this"),
           threshold: list[str] = typer.Option(None, "--threshold", help="override: RULE.NAME=VALUE (repeatable)"),
           follow: bool = typer.Option(False, "--follow", help="re-evaluate a run that is still being written"),
           interval: float = typer.Option(5.0, "--interval", help="seconds between --follow evaluations"),
           max_iterations: int = typer.Option(0, "--max-iterations", help="stop --follow after N evaluations (0: until the run ends)"),
           metrics_port: int = typer.Option(None, "--metrics-port",
                                            help="with --follow: serve each evaluation's findings on /metrics at this "
                                                 "port (0: a free one) and register the target in the run's "
                                                 "prometheus_sd, for the RlobsDoctorPrecursor alert"),
           metrics_addr: str = typer.Option(None, "--metrics-addr", envvar="RLOBS_METRICS_ADDR",
                                            help="address --metrics-port binds (default 127.0.0.1)"),
           verbose: bool = typer.Option(False, "--verbose", "-v", help="also list rules with insufficient data"),
           runbook_base_url: str = typer.Option(None, "--runbook-base-url", envvar="RLOBS_RUNBOOK_BASE_URL",
                                                help="link runbooks at <URL>/<rule>.md (default: the installed "
                                                     "pages on this machine)")) -> None:
    """Diagnose a run: ranked findings with evidence, root cause and runbook. Exit 0 healthy, 1 warnings, 2 critical."""
    from rlobs.doctor import diagnose, parse_thresholds, registry
    from rlobs.doctor.render import print_report, rules_table, to_json, to_markdown
    from rlobs.runbooks import configure as configure_runbooks

    configure_runbooks(runbook_base_url)
    rules = registry()
    if list_rules:
        if as_json:
            sys.stdout.write(json.dumps({r.id: {"concern": r.concern, "title": r.title, "needs": list(r.needs),
                                                "thresholds": dict(r.thresholds), "runbook": r.runbook, "doc": r.doc}
                                         for r in rules.values()}, indent=2) + "\n")
        else:
            console.print(rules_table(rules))
        return
    if run is None:
        raise fail("give a run directory (or --list-rules)", exitcodes.USAGE)
    try:
        overrides = parse_thresholds(threshold or [], rules)
        unknown = [r for r in (rule or []) if r not in rules]
        if unknown:
            raise ValueError(f"unknown rule(s) {unknown}; valid: {', '.join(rules)}")
        if metrics_port is not None and not follow:
            raise ValueError("--metrics-port serves the findings of a run as it grows: give --follow too")
        if metrics_port is not None and not 0 <= metrics_port <= 65535:
            raise ValueError(f"--metrics-port {metrics_port}: give a port, 0 to 65535 (0: a free one)")
    except ValueError as exc:
        raise fail(exc, exitcodes.USAGE) from None
    exporter = None

    def evaluate() -> Any:
        record = _open(run)
        try:
            quiet = as_json or markdown or not err_console.is_terminal
            if quiet:
                report = diagnose(record, rule_ids=rule or None, since_step=since_step, thresholds=overrides)
            else:
                from rich.progress import Progress

                with Progress(transient=True, console=err_console) as progress:
                    task = progress.add_task("diagnosing", total=len(rule or rules))
                    report = diagnose(record, rule_ids=rule or None, since_step=since_step, thresholds=overrides,
                                      on_rule=lambda rid: progress.update(task, advance=1, description=rid))
            if exporter is not None:
                exporter.update(report, record)
            return report, record
        finally:
            record.close()

    def emit(report: Any) -> None:
        if as_json and follow:  # JSON Lines: one compact document per evaluation, flushed as it comes
            sys.stdout.write(json.dumps(report.to_dict(), sort_keys=True, default=str, separators=(",", ":")) + "\n")
            sys.stdout.flush()
        elif as_json:
            sys.stdout.write(to_json(report) + "\n")
        elif markdown:
            sys.stdout.write(to_markdown(report) + "\n")
        else:
            print_report(report, console, verbose=verbose)

    if metrics_port is not None:
        from rlobs.doctor.exporter import DoctorExporter

        first = _open(run)
        run_id = first.run_id
        first.close()
        try:
            exporter = DoctorExporter(run, run_id, port=metrics_port, addr=metrics_addr, interval=interval)
        except OSError as exc:
            raise fail(f"--metrics-port {metrics_port}: cannot serve on {metrics_addr or '127.0.0.1'}: {exc}",
                       exitcodes.USAGE) from None
        err_console.print(f"serving the doctor's findings on {exporter.url}", soft_wrap=True)
    try:
        _follow_loop(evaluate, emit, follow, interval, max_iterations,
                     on_miss=exporter.failed if exporter is not None else None)
    finally:
        if exporter is not None:
            exporter.close()


FOLLOW_MISSES = 10  # --follow: consecutive evaluations that could not read the record before the doctor gives up


def _follow_loop(evaluate: Any, emit: Any, follow: bool, interval: float, max_iterations: int,
                 on_miss: Any = None) -> None:
    """``rlobs doctor``'s evaluation, once or (``--follow``) every ``interval`` s until the run ends; exits with the
    last report's code. Following, a record that cannot be opened this time (moved, mid-copy, a disk hiccup; its
    error printed) keeps the last report and is tried again (``on_miss`` called: the exporter counts it), up to
    ``FOLLOW_MISSES`` times running: a watcher that exits on one bad read leaves the live alert blind."""
    report, record = evaluate()
    emit(report)
    if follow:
        import time as _time

        seen = json.dumps([f.to_dict() for f in report.findings], sort_keys=True, default=str)
        iterations, misses = 1, 0
        while not max_iterations or iterations < max_iterations:
            if all(p.status in ("ended", "lost") for p in record.processes) and record.processes:
                break
            _time.sleep(interval)
            iterations += 1
            try:
                report, record = evaluate()
            except typer.Exit as exc:  # _open's input error, already printed
                misses += 1
                if on_miss is not None:
                    on_miss()
                if misses >= FOLLOW_MISSES:
                    raise fail(f"gave up following: the record could not be read {misses} times running",
                               exc.exit_code) from None
                continue
            misses = 0
            now = json.dumps([f.to_dict() for f in report.findings], sort_keys=True, default=str)
            if now != seen:
                emit(report)
                seen = now
    raise typer.Exit(report.exit_code)


# --- dashboards, alerts and the local Prometheus (rlobs.dashboards; imported lazily) ---
dashboards_app = typer.Typer(cls=_Group, add_completion=False, no_args_is_help=True,
                             help="Grafana dashboards, alert rules and promtool tests generated from the catalogue.")
app.add_typer(dashboards_app, name="dashboards")


def _step_seconds(step_seconds: float | None, measured_from: Path | None) -> int:
    """The step time the precursor alerts are built for: ``--step-seconds``, or the one measured in
    ``--step-seconds-from``'s record, in whole even seconds (default: the committed 120); or a usage error."""
    from rlobs.dashboards.alerts import PRECURSOR_STEP_SECONDS, rules_step_seconds
    from rlobs.dashboards.pace import PaceError, measured_step_seconds

    if step_seconds is not None and measured_from is not None:
        raise fail("give --step-seconds or --step-seconds-from, not both", exitcodes.USAGE)
    if measured_from is not None:
        try:
            step_seconds = measured_step_seconds([measured_from])
        except PaceError as exc:
            raise fail(f"--step-seconds-from: {exc}", exitcodes.INPUT) from None
        err_console.print(f"{measured_from}: a median of {step_seconds:.1f} s between optimiser steps", soft_wrap=True)
    if step_seconds is None:
        return PRECURSOR_STEP_SECONDS
    try:
        built = rules_step_seconds(step_seconds)
    except ValueError as exc:
        raise fail(f"--step-seconds-from {measured_from}: {exc}" if measured_from is not None
                   else f"--step-seconds: {exc}", exitcodes.USAGE) from None
    if built != step_seconds:
        err_console.print(f"the precursor alerts are built for {built} s a step (whole even seconds)")
    return built


@dashboards_app.command("build")
def dashboards_build(out: Path = typer.Option(None, "--out", help="output folder (default: the checkout's dashboards/)"),
                     check: bool = typer.Option(False, "--check", help="compare instead of writing; exit 1 on a difference"),
                     runbook_base_url: str = typer.Option(None, "--runbook-base-url",
                                                          envvar="RLOBS_RUNBOOK_BASE_URL",
                                                          help="where your team serves runbooks/*.md (alerts' runbook_url = "
                                                               "this + <id>.md; default: rlobs' own runbooks)"),
                     step_seconds: float = typer.Option(
                         None, "--step-seconds",
                         help="your run's optimiser step time, seconds: the precursor alerts' windows and `for` "
                              "are scaled to hold the same steps (the committed rules: 120, the last 10 min = 5 "
                              "steps, the hour before = 30)"),
                     step_seconds_from: Path = typer.Option(
                         None, "--step-seconds-from",
                         help="a run record (a previous run of the same settings): its median time between "
                              "optimiser steps is the step time")
                     ) -> None:
    """Write dashboards/*.json, alerts.yaml, alerts_test.yaml and provisioning/ (or check them)."""
    from rlobs.dashboards.build import build, default_out_dir

    step_seconds = _step_seconds(step_seconds, step_seconds_from)
    target = out or default_out_dir()
    result = build(target, check=check, runbook_base=runbook_base_url, step_seconds=step_seconds)
    # soft_wrap: paths print whole (one folded mid-name at the console's width cannot be copied)
    for name in result.unexpected:
        err_console.print(f"[yellow]not generated any more:[/] {target / name}", soft_wrap=True)
    if check:
        if result.differing:
            for name in result.differing:
                err_console.print(f"[red]out of date:[/] {target / name}", soft_wrap=True)
            err_console.print("run `rlobs dashboards build` and commit the result")
            raise typer.Exit(1)
        console.print(f"[green]{target} is up to date[/]", soft_wrap=True)
        return
    for name in result.written:
        console.print(f"wrote {target / name}", soft_wrap=True)
    if not result.written:
        console.print(f"[green]{target} already up to date[/]")


@app.command()
def observe(run_dirs: list[Path] = typer.Argument(..., help="run directories to scrape (their prometheus_sd/*.json)"),
            port: int = typer.Option(9090, "--port", help="Prometheus port on 127.0.0.1 (0: a free one)"),
            scrape_interval: str = typer.Option("2s", "--scrape-interval", help="scrape and rule-evaluation interval"),
            rules: Path = typer.Option(None, "--rules", help="alert rules file (default: the generated rules)"),
            runbook_base_url: str = typer.Option(None, "--runbook-base-url", envvar="RLOBS_RUNBOOK_BASE_URL",
                                                 help="base of the generated rules' runbook_url (see dashboards build)"),
            step_seconds: float = typer.Option(None, "--step-seconds",
                                               help="the runs' optimiser step time, seconds: the generated precursor "
                                                    "alerts' windows hold the same steps (see dashboards build; not with --rules)"),
            step_seconds_from: Path = typer.Option(None, "--step-seconds-from",
                                                   help="a run record whose median time between optimiser steps is "
                                                        "the step time (see dashboards build)"),
            doctor: bool = typer.Option(True, "--doctor/--no-doctor",
                                        help="run the doctor on each run as it grows and serve its findings to this "
                                             "Prometheus (RlobsDoctorPrecursor: the recommended early warning, at any "
                                             "step time; rlobs doctor RUN --follow --metrics-port 0 per run does the "
                                             "same); --no-doctor: the PromQL precursor alerts only"),
            doctor_interval: float = typer.Option(10.0, "--doctor-interval",
                                                  help="seconds between the doctor's evaluations of each run (keep it "
                                                       "above one evaluation's time on long records)")
            ) -> None:
    """Run Debian's Prometheus on 127.0.0.1 over the run(s), with the rlobs alert rules; Ctrl-C stops it.
    Prints targets coming up and going down, alerts pending / firing / resolved and runs ending."""
    from rlobs.dashboards.observe import PrometheusError, serve_forever

    missing = [str(d) for d in run_dirs if not d.is_dir()]
    if missing:  # a typo would otherwise watch nothing, silently, forever
        raise fail(f"no such run directory: {', '.join(missing)} (start the run first, or create the folder "
                   "it will write to)", exitcodes.INPUT)

    step_seconds = _step_seconds(step_seconds, step_seconds_from)
    if doctor and not 0.1 <= doctor_interval <= 3600:
        raise fail(f"--doctor-interval {doctor_interval:g}: give seconds between evaluations, 0.1 to 3600",
                   exitcodes.USAGE)
    try:
        code = serve_forever(run_dirs, port=port, scrape_interval=scrape_interval, rules_file=rules,
                             runbook_base=runbook_base_url, step_seconds=step_seconds,
                             doctor_interval=doctor_interval if doctor else None,
                             echo=lambda line: console.print(line, highlight=False, soft_wrap=True))
    except PrometheusError as exc:
        raise fail(exc, exitcodes.UNAVAILABLE) from None
    raise typer.Exit(code)


# --- import (rlobs.importers; imported lazily) ---
@app.command("import")
def import_cmd(source: str = typer.Argument(..., help="verl | openrlhf | trl | areal | slime | nemo-rl | prime-rl | "
                                                      "wandb | tensorboard"),
               path: Path = typer.Argument(..., help="log file or folder: JSONL / console log / trainer_state.json / "
                                                     "checkpoint folder / wandb run folder or export / TensorBoard folder"),
               out: Path = typer.Option(..., "--out", help="new run directory to write"),
               framework: str = typer.Option(None, "--framework",
                                             help="verl | openrlhf | trl | areal | slime | nemo-rl | prime-rl "
                                                  "(default: the source, or detected from names)"),
               as_json: bool = typer.Option(False, "--json", help="print the import report as JSON"),
               map_file: Path = typer.Option(None, "--map",
                                             help='JSON {"logged name": "kind.field [key=value] (op)"} for custom '
                                                  "names (adds to / overrides the framework table)")) -> None:
    """Import another trainer's metric log into a run record (then: rlobs doctor OUT). Exit 65 when nothing
    could be imported; lines that could not be read are listed, never silently dropped."""
    from rlobs.importers import ImportFailed, import_run

    try:
        report = import_run(source, path, out, framework=framework, map_file=map_file)
    except ImportFailed as exc:
        raise fail(exc, exitcodes.INPUT) from None
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, sort_keys=True, default=str) + "\n")
        return
    for line in report.summary_lines():
        console.print(line, highlight=False, soft_wrap=True)
    console.print(f"wrote {out} (report: {out / 'import_report.json'}); next: rlobs doctor {out}", highlight=False)


# --- follow: tail a growing log into a run record and /metrics (rlobs.importers.follow; imported lazily) ---
@app.command()
def follow(fmt: str = typer.Argument(..., metavar="FORMAT",
                                     help="verl (FileLogger JSONL) | jsonl | tensorboard | wandb (with --framework) "
                                          "| trl (output folder)"),
           path: Path = typer.Argument(..., help="the log file (or TensorBoard / TRL output / wandb folder) a running "
                                                 "job writes"),
           out: Path = typer.Option(..., "--out", help="run directory (created, or resumed where it stopped)"),
           framework: str = typer.Option(None, "--framework", help="metric map for jsonl logs"),
           map_file: Path = typer.Option(None, "--map", help="JSON name map, as for rlobs import"),
           metrics_port: int = typer.Option(None, "--metrics-port", help="/metrics port (default: a free one; "
                                                                         "RUN/prometheus_sd/ names it)"),
           poll: float = typer.Option(0.2, "--poll", help="seconds between checks for new lines"),
           seconds: float = typer.Option(None, "--seconds", help="stop after this long (default: until killed)")
           ) -> None:
    """Tail a growing metric log into a run record and a /metrics endpoint (dashboards, alerts, rlobs doctor
    --follow on a running job). Restart-safe: resumes at the last line recorded, without duplicates."""
    import signal
    import time as _time

    from rlobs.importers import FRAMEWORKS, ImportFailed
    from rlobs.importers.follow import FORMATS, Follower

    if fmt not in FORMATS or (framework is not None and framework not in FRAMEWORKS) or \
            (framework is None and fmt in ("jsonl", "tensorboard", "wandb")):
        raise fail(f"FORMAT is one of {', '.join(FORMATS)}; --framework (one of {', '.join(FRAMEWORKS)}) is "
                   f"needed for jsonl, tensorboard and wandb (got {fmt!r}, {framework!r})", exitcodes.USAGE)
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        f = Follower(fmt, path, out, framework=framework, map_file=map_file, metrics_port=metrics_port, poll_s=poll)
        f.start()
    except ImportFailed as exc:
        raise fail(exc, exitcodes.INPUT) from None
    sys.stdout.write(json.dumps({"following": str(path), "out": str(out), "offset": f.offset}) + "\n")
    sys.stdout.flush()
    until = _time.time() + seconds if seconds else None
    try:
        while not stopping and (until is None or _time.time() < until):
            if f.poll_once() == 0:
                _time.sleep(poll)
    except KeyboardInterrupt:
        pass
    finally:
        f.close()
    console.print(f"followed {f.lines} line(s) of {path} into {out} (offset {f.offset}; issues: "
                  f"{len(f.report.issues)}, see {out / 'follow_report.json'})", highlight=False)


def _allowed_hosts(address: str) -> list[str]:
    """Host names a browser may use to reach the app bound to ``address`` (Streamlit's ``server.allowedHosts``;
    any other Host, e.g. a rebinding attacker's domain, has its WebSocket refused)."""
    import ipaddress
    import socket

    hosts = [address]
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return hosts  # a host name: exactly that name
    if ip.is_loopback:
        hosts += ["localhost", "127.0.0.1", "::1"]
    elif ip.is_unspecified:  # bound to every interface: this machine's own names
        hosts += ["localhost", "127.0.0.1", socket.gethostname(), socket.getfqdn()]
    return list(dict.fromkeys(hosts))


# --- replay: the Streamlit triage and replay app (rlobs.app; streamlit runs in a child process) ---
@app.command()
def replay(run: Path = typer.Argument(..., help="run directory"),
           run2: Path = typer.Argument(None, help="second run directory, for Compare"),
           port: int = typer.Option(8501, "--port", help="port (0: a free one)"),
           address: str = typer.Option("127.0.0.1", "--address", help="address to bind (default: loopback only)"),
           runs_root: Path = typer.Option(None, "--runs-root",
                                          help="folder the app may open runs from (default: the runs' common parent)")
           ) -> None:
    """Open the triage and replay app on the run(s): Streamlit, headless, XSRF protection on."""
    import importlib.util
    import os
    import signal
    import socket
    import subprocess

    from rlobs.app import MAIN_SCRIPT, paths
    from rlobs.store.manifest import RunRecordError, read_manifest

    if importlib.util.find_spec("streamlit") is None:
        raise fail("streamlit is not installed: pip install 'rlobs[app]'", exitcodes.UNAVAILABLE)
    runs = [r for r in (run, run2) if r is not None]
    root = (runs_root or paths.common_root(runs)).resolve()
    try:
        confined = [paths.confine(root, r.resolve()) for r in runs]
        for r in confined:
            read_manifest(r)
    except (paths.PathOutsideRoot, RunRecordError) as exc:
        raise fail(exc, exitcodes.INPUT) from None
    if port == 0:
        with socket.socket() as s:
            s.bind((address, 0))
            port = s.getsockname()[1]
    env = {**os.environ, paths.ENV_ROOT: str(root),
           paths.ENV_RUNS: os.pathsep.join(paths.relative_name(root, r) for r in confined)}
    cmd = [sys.executable, "-m", "streamlit", "run", str(MAIN_SCRIPT), "--server.headless", "true",
           "--server.address", address, "--server.port", str(port), "--server.enableXsrfProtection", "true",
           "--server.enableCORS", "true", "--server.fileWatcherType", "none", "--server.runOnSave", "false",
           "--browser.gatherUsageStats", "false", "--global.developmentMode", "false",
           "--client.toolbarMode", "viewer", "--client.showErrorDetails", "none"]
    for host in _allowed_hosts(address):  # DNS rebinding: only Host headers naming the bound address
        cmd += ["--server.allowedHosts", host]
    err_console.print(f"rlobs replay: http://{address}:{port}  (runs root {root}; Ctrl-C stops)")
    proc = subprocess.Popen(cmd, env=env)

    def _stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        code = proc.wait()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: stop the server too, never leave it running
        proc.terminate()
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    raise typer.Exit(code)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
