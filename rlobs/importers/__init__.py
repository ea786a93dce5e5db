"""Importers: turn the metric logs of other trainers (verl, OpenRLHF, TRL) into an rlobs run record.

    from rlobs.importers import import_run
    report = import_run("verl", "metrics.jsonl", "runs/verl-imported")   # then: rlobs doctor runs/verl-imported

``source`` is what the first argument of ``rlobs import`` names: a framework (``verl``, ``openrlhf``,
``trl``: its log file, TensorBoard folder, wandb export or, for TRL, ``trainer_state.json`` / a
checkpoint folder) or a log format (``wandb``, ``tensorboard``: the framework is detected from the
metric names unless ``framework`` is given). The record is written through the normal recorder
(``rlobs.init``), one event per (step, kind), unmapped metrics as ``scalar`` events, and the
``ImportReport`` is saved as ``import_report.json`` beside it. Mapping tables: docs/importers.md.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rlobs.importers import (
    areal,
    nemo_rl,
    openrlhf,
    prime_rl,
    readers,
    slime,
    tensorboard,
    trl,
    verl,
    wandb,
)
from rlobs.importers.mapping import (
    MetricRow,
    MetricTable,
    Target,
    convert,
    load_user_map,
)
from rlobs.importers.report import REPORT_FILE, ImportFailed, ImportReport

TABLES: dict[str, MetricTable] = {"verl": verl.TABLE, "openrlhf": openrlhf.TABLE, "trl": trl.TABLE,
                                   "areal": areal.TABLE, "slime": slime.TABLE, "nemo-rl": nemo_rl.TABLE,
                                   "prime-rl": prime_rl.TABLE}
FRAMEWORKS = tuple(TABLES)
SOURCES = (*FRAMEWORKS, "wandb", "tensorboard")
GENERIC = MetricTable(framework="generic", exact={})
FLUSH_EVERY = 50_000

__all__ = [
    "FRAMEWORKS",
    "REPORT_FILE",
    "SOURCES",
    "TABLES",
    "ImportFailed",
    "ImportReport",
    "MetricTable",
    "Target",
    "detect_framework",
    "import_run",
    "read_rows",
]


def _trl_state_in(folder: Path) -> Path | None:
    """The newest checkpoint's trainer_state.json in a TRL output folder (or the folder's own)."""
    own = folder / "trainer_state.json"
    if own.exists():
        return own
    ckpts = [(int(m.group(1)), p) for p in folder.glob("checkpoint-*/trainer_state.json")
             if (m := re.search(r"checkpoint-(\d+)", str(p.parent.name)))]
    return max(ckpts)[1] if ckpts else None


def read_rows(source: str, path: Path, report: ImportReport) -> list[MetricRow]:
    """Read ``path`` as ``source`` names it; fills report.source / source_format / issues."""
    if source not in SOURCES:
        raise ImportFailed(f"unknown source {source!r}; valid: {', '.join(SOURCES)}")
    if not path.exists():
        raise ImportFailed(f"{path} does not exist")
    if source == "tensorboard":
        return tensorboard.read(path, report)
    if source == "wandb":
        return wandb.read(path, report)
    if path.is_dir():
        state = _trl_state_in(path) if source == "trl" else None
        if state is not None:
            path = state
        elif any(path.rglob(wandb.HISTORY)) or any(path.rglob(wandb.CONSOLE)) or wandb.has_run_file(path):
            return wandb.read(path, report)
        else:
            return tensorboard.read(path, report)
    if wandb.has_run_file(path):
        return wandb.read(path, report)
    report.source = str(path)
    fmt = readers.sniff(path)
    report.source_format = fmt
    if fmt == "tensorboard":
        return tensorboard.read(path, report)
    if fmt == "trl-state":
        return readers.read_trl_state(path, report)
    if fmt == "jsonl":
        return readers.read_jsonl(path, report)
    if fmt == "csv":
        return readers.read_csv(path, report)
    keys = frozenset(TABLES[source].exact) if source in TABLES else frozenset()
    return readers.read_console(path, report, training_keys=keys)


def detect_framework(rows: list[MetricRow]) -> tuple[str, dict[str, int]]:
    """The framework whose table maps the most names ("generic" when none maps any)."""
    names = {n for r in rows for n in r.values}
    scores = {fw: t.score(names) for fw, t in TABLES.items()}
    best = max(scores.values())
    if best == 0:
        return "generic", scores
    top = [fw for fw, s in scores.items() if s == best]
    if len(top) > 1:
        raise ImportFailed(f"cannot tell the framework from the metric names (ties: {scores}); "
                           f"give --framework {'|'.join(FRAMEWORKS)}")
    return top[0], scores


def import_run(source: str, path: str | Path, out: str | Path, *, framework: str | None = None,
               name: str | None = None, map_file: str | Path | None = None) -> ImportReport:
    """Import ``path`` into a new run record at ``out``. Raises ImportFailed (with the reason) when
    nothing can be imported or ``out`` already holds a record. ``map_file``: a JSON object of
    ``{"logged name": "kind.field [key=value] (op)"}`` that adds to (and overrides) the framework's table."""
    import rlobs

    path, out = Path(path), Path(out)
    if (out / "manifest.json").exists() or (out / "events").exists():
        raise ImportFailed(f"{out} already holds a run record; import into a new folder")
    if framework is not None and framework not in TABLES:
        raise ImportFailed(f"unknown framework {framework!r}; valid: {', '.join(FRAMEWORKS)}")
    user = load_user_map(map_file) if map_file is not None else {}
    report = ImportReport(source=str(path))
    rows = read_rows(source, path, report)
    detected, scores = detect_framework(rows) if len(rows) else ("generic", {})
    fw = framework or (source if source in TABLES else detected)
    if fw != "generic" and scores.get(fw, 0) == 0 and detected != "generic":
        report.notes.append(f"no metric name is a {fw} name; the names look like {detected} ({scores})")
    elif fw == "generic":
        report.notes.append("no known framework metric names: everything was kept as scalar events")
    report.framework = fw
    table = TABLES.get(fw, GENERIC)
    if user:
        table = MetricTable(framework=table.framework, exact={**table.exact, **user}, patterns=table.patterns,
                            prefixes=table.prefixes)
        report.notes.append(f"{len(user)} name(s) mapped by {map_file}")
    events = convert(rows, table, report, source=f"{fw}:{Path(report.source).name}")
    steps = [s for s, _k, _f in events if s is not None]
    report.steps = (min(steps), max(steps)) if steps else None
    config: dict[str, Any] = {"imported_from": str(report.source), "framework": fw, "source_format": report.source_format}
    rec = rlobs.init(out, component="trainer", rank=0, name=name or out.name, config=config, prometheus=False,
                     otel=False, set_global=False)
    try:
        for i, (step, kind, fields) in enumerate(events, 1):
            rec.emit(kind, step=step, **fields)
            report.events[kind] = report.events.get(kind, 0) + 1
            if i % FLUSH_EVERY == 0:  # back-pressure: the recorder's queue is bounded and would drop
                rec.flush(timeout=120.0)
    finally:
        rec.close()
    dropped = rec.stats()["dropped_total"]
    if dropped:
        report.issue(str(out), "dropped", f"{dropped} event(s) rejected by the recorder: {rec.stats()['dropped']}")
    report.run_dir = str(out)
    report.write(out)
    return report
