"""wandb runs: a run folder (``wandb/run-*`` or ``wandb/offline-run-*``) with its ``run-<id>.wandb`` file
(current clients; read by ``wandb_binary`` with the wandb package's protobuf definitions), or the exports
of older clients and of the API: ``wandb-history.jsonl``, ``output.log`` or a CSV.

The text exports need no wandb package; no network is used either way. ``wandb-history.jsonl`` holds one JSON
object per ``wandb.log`` call with ``_step``, ``_runtime``, ``_timestamp`` (kept as scalars) and the
logged names; media and tables are objects with ``_type`` and are counted as not numbers. ``output.log``
is the run's console (verl's ``step:N`` lines, TRL's printed dicts). The framework is detected from the
metric names unless given.
"""

from __future__ import annotations

from pathlib import Path

from rlobs.importers import wandb_binary
from rlobs.importers.mapping import MetricRow
from rlobs.importers.readers import read_console, read_csv, read_jsonl, sniff
from rlobs.importers.report import ImportFailed, ImportReport

HISTORY = "wandb-history.jsonl"
CONSOLE = "output.log"


def resolve(path: Path) -> Path:
    """A run folder -> its history file (else its console log); a file -> itself."""
    if not path.is_dir():
        return path
    for name in (HISTORY, CONSOLE):
        hits = sorted(path.rglob(name))
        if hits:
            return hits[0]
    csvs = sorted(path.rglob("*.csv"))
    if csvs:
        return csvs[0]
    raise ImportFailed(f"{path}: no run-<id>.wandb, {HISTORY}, {CONSOLE} or CSV export inside (a wandb run "
                       "folder looks like wandb/run-<date>_<time>-<id>/ or wandb/offline-run-<date>_<time>-<id>/)")


def has_run_file(path: Path) -> bool:
    return bool(wandb_binary.run_files(path)) if path.is_dir() else wandb_binary.is_wandb_file(path)


def read(path: Path, report: ImportReport) -> list[MetricRow]:
    if has_run_file(path) and not (path.is_dir() and any(path.rglob(HISTORY))):
        return wandb_binary.read(path, report)
    path = resolve(path)
    report.source = str(path)
    if path.suffix == ".csv":
        report.source_format = "wandb-csv"
        return read_csv(path, report)
    fmt = sniff(path)
    if fmt == "jsonl":
        report.source_format = "wandb-history"
        return read_jsonl(path, report)
    if fmt in ("verl-console", "python-dicts"):
        report.source_format = "wandb-output-log"
        return read_console(path, report)
    raise ImportFailed(f"{path}: a {fmt} file is not a wandb export; use `rlobs import {fmt.split('-')[0]}`")
