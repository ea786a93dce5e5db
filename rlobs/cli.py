"""The ``rlobs`` command line (typer + rich).

    rlobs info RUN            kinds and counts, time span, processes, schema version, truncation
    rlobs info RUN --json     the same as JSON

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
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="rlobs: flight recorder and doctor for RL post-training of LLMs.")
console = Console()
err_console = Console(stderr=True)


@app.callback()
def _root() -> None:
    """rlobs: flight recorder and doctor for RL post-training of LLMs."""


def _fmt_ts(ns: int | None) -> str:
    if ns is None:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _open(run: Path) -> Any:
    from rlobs.store import RunRecordError, open_run

    try:
        return open_run(run)
    except RunRecordError as exc:
        err_console.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None


@app.command()
def info(run: Path = typer.Argument(..., help="run directory"),
         as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables")) -> None:
    """Summarise a run record: event kinds and counts, time span, processes, schema, damage."""
    with _open(run) as record:
        data = record.info()
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        return
    console.print(f"[bold]run[/] {data['run_id']}  [dim]{data['path']}[/]")
    console.print(f"schema {data['schema_version']} · {data['events']:,} events · "
                  f"{_fmt_ts(data['first_ts_ns'])} → {_fmt_ts(data['last_ts_ns'])} ({data['duration_s']:.1f} s)")
    kinds = Table(title="events by kind", show_edge=False)
    kinds.add_column("kind")
    kinds.add_column("events", justify="right")
    for kind, n in sorted(data["kinds"].items(), key=lambda kv: -kv[1]):
        kinds.add_row(kind, f"{n:,}")
    console.print(kinds)
    procs = Table(title="processes", show_edge=False)
    for col in ("process", "component", "rank", "host", "pid", "status", "events"):
        procs.add_column(col, justify="right" if col in ("rank", "pid", "events") else "left")
    for p in data["processes"]:
        style = {"lost": "red", "running": "yellow"}.get(p["status"], "")
        procs.add_row(p["process"], p["component"], str(p["rank"]), p["host"], str(p["pid"]),
                      f"[{style}]{p['status']}[/]" if style else p["status"], f"{p['events']:,}")
    console.print(procs)
    if data["problems"]:
        probs = Table(title="[red]segments not read in full[/]", show_edge=False)
        for col in ("kind", "problem", "rows read", "bytes unread", "file", "detail"):
            probs.add_column(col)
        for p in data["problems"]:
            probs.add_row(p["kind"], p["problem"], str(p["rows_read"]), str(p["bytes_unread"]),
                          Path(p["path"]).name, p["detail"][:80])
        console.print(probs)
        if data["truncated"]:
            console.print("[yellow]record has a truncated tail (a writer was killed): "
                          "everything before it was read[/]")
    else:
        console.print("[green]all segments read in full[/]")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
