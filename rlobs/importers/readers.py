"""Text log readers: JSONL (verl's file logger, TRL / generic JSON lines, wandb-history.jsonl), console
output (verl's ``step:N - k:v`` lines, TRL's printed dicts), TRL's ``trainer_state.json``, CSV exports.

Each reader returns ``MetricRow``s and records every line it could not read in the ``ImportReport``
(malformed, truncated last line); it raises ``ImportFailed`` only when nothing at all could be read.
``sniff`` names the format of a file from its first lines.
"""

from __future__ import annotations

import ast
import csv
import json
import re
from pathlib import Path
from typing import Any

from rlobs.importers.mapping import STEP_KEYS, MetricRow, pick_step
from rlobs.importers.report import ImportFailed, ImportReport

VERL_CONSOLE = re.compile(r"step:(\d+) - (.*)$")
_BARE_NONFINITE = re.compile(r"(?<=[:\s,\[])(-?inf|nan)(?=\s*[,}\]])")
_SNIFF_LINES = 200


def read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImportFailed(f"cannot read {path}: {exc}") from None
    if not data.strip():
        raise ImportFailed(f"{path} is empty: nothing to import")
    if b"\x00" in data[:4096]:
        raise ImportFailed(f"{path} is a binary file, not a text log (TensorBoard event files: "
                           "`rlobs import tensorboard PATH`)")
    return data.decode("utf-8", errors="replace")


def sniff(path: Path) -> str:
    """jsonl | verl-console | python-dicts | trl-state | csv | tensorboard; ImportFailed when none fits."""
    if path.is_dir():
        if any(p.name.startswith("events.out.tfevents") for p in path.rglob("*")):
            return "tensorboard"
        raise ImportFailed(f"{path} is a folder without TensorBoard event files; give a log file")
    if path.name.startswith("events.out.tfevents"):
        return "tensorboard"
    text = read_text(path)
    head = text.lstrip()[:200000]
    if path.suffix == ".json" or head.startswith(("{\n", '{"log_history"')):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("log_history"), list):
            return "trl-state"
    if path.suffix == ".csv":
        return "csv"
    lines = [ln for ln in text.splitlines()[:_SNIFF_LINES * 50] if ln.strip()]
    for ln in lines:
        s = ln.strip()
        if s.startswith("{"):
            try:
                json.loads(s)
                return "jsonl"
            except json.JSONDecodeError:
                pass
        if VERL_CONSOLE.search(s):
            return "verl-console"
        if "{'" in s and s.rstrip().endswith("}"):
            return "python-dicts"
    first = lines[0][:80] if lines else ""
    raise ImportFailed(f"{path}: no metric lines recognised (expected JSON lines, verl console lines "
                       f"'step:N - name:value', TRL printed dicts, trainer_state.json, CSV or TensorBoard events); "
                       f"first line: {first!r}")


def _row_from_object(obj: dict[str, Any], origin: str) -> MetricRow:
    """verl file logger: {"step", "data": {...}, ...}; flat objects otherwise (step from STEP_KEYS)."""
    if isinstance(obj.get("data"), dict):
        step, key = pick_step(obj, ("step",))
        values = dict(obj["data"])
        for k, v in obj.items():
            if k not in ("data", key):
                values[f"_{k}" if k in values else k] = v
        return MetricRow(step, values, origin)
    flat = flatten(obj)
    step, key = pick_step(flat, STEP_KEYS)
    return MetricRow(step, {k: v for k, v in flat.items() if k != key}, origin)


def flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested metric dicts as ``a/b`` names; wandb media / table objects (``_type``) stay whole."""
    out: dict[str, Any] = {}
    for k, v in obj.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and v and "_type" not in v:
            out.update(flatten(v, f"{name}/"))
        else:
            out[name] = v
    return out


def read_jsonl(path: Path, report: ImportReport) -> list[MetricRow]:
    text = read_text(path)
    rows: list[MetricRow] = []
    lines = text.split("\n")
    complete = text.endswith("\n")
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if not s:
            continue
        where = f"{path.name}:{i}"
        try:
            obj = json.loads(s)
        except json.JSONDecodeError as exc:
            last = i == len(lines) and not complete
            report.issue(where, "truncated" if last else "malformed",
                         ("last line cut off (writer killed?): " if last else "") + f"{exc.msg}: {s[:120]!r}")
            continue
        if not isinstance(obj, dict):
            report.issue(where, "malformed", f"a JSON {type(obj).__name__}, not an object")
            continue
        rows.append(_row_from_object(obj, where))
    if not rows:
        raise ImportFailed(f"{path}: no readable JSON object lines ({len(report.issues)} malformed)")
    return rows


def parse_verl_console(line: str) -> tuple[int, dict[str, Any]] | None:
    m = VERL_CONSOLE.search(line)
    if not m:
        return None
    values: dict[str, Any] = {}
    for part in m.group(2).split(" - "):
        name, sep, raw = part.rpartition(":")
        if not sep or not name:
            continue
        try:
            values[name.strip()] = float(raw.strip())
        except ValueError:
            values[name.strip()] = raw.strip()
    return int(m.group(1)), values


def parse_python_dict(line: str) -> dict[str, Any] | None:
    """A dict printed by Python (TRL / transformers console logs); literals only, never eval."""
    start, end = line.find("{"), line.rfind("}")
    if start < 0 or end <= start:
        return None
    body = _BARE_NONFINITE.sub(lambda m: repr(m.group(1)), line[start:end + 1])
    try:
        obj = ast.literal_eval(body)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def read_console(path: Path, report: ImportReport, *, training_keys: frozenset[str] = frozenset()) -> list[MetricRow]:
    """verl ``step:N - k:v`` lines and printed dicts; other lines (progress bars, warnings) are skipped and
    counted. Printed dicts carry no step: rows with a training key get the next ordinal step."""
    text = read_text(path)
    rows: list[MetricRow] = []
    other = 0
    ordinal = 0
    dict_rows = 0
    for i, raw_line in enumerate(text.splitlines(), 1):
        line = raw_line.split("\r")[-1].strip()  # tqdm redraws with \r
        if not line:
            continue
        where = f"{path.name}:{i}"
        parsed = parse_verl_console(line)
        if parsed is not None:
            rows.append(MetricRow(parsed[0], parsed[1], where))
            continue
        if "{" in line and line.endswith("}"):
            obj = parse_python_dict(line)
            if obj is None:
                report.issue(where, "malformed", f"unreadable dict line: {line[:120]!r}")
                continue
            step, key = pick_step(obj, STEP_KEYS)
            if step is None and (not training_keys or training_keys & set(obj)):
                ordinal += 1
                step = ordinal
                dict_rows += 1
            rows.append(MetricRow(step, {k: v for k, v in obj.items() if k != key}, where))
            continue
        other += 1
    if not rows:
        raise ImportFailed(f"{path}: no metric lines among {other} console line(s)")
    if dict_rows:
        report.notes.append(f"{dict_rows} printed dict(s) carry no step: steps 1..{ordinal} were assigned in line "
                            "order (exact if logging_steps=1; trainer_state.json has the real steps)")
    if other:
        report.notes.append(f"{other} console line(s) without metrics were skipped (progress bars, messages)")
    return rows


def read_trl_state(path: Path, report: ImportReport) -> list[MetricRow]:
    """``trainer_state.json``: its ``log_history`` (one dict per logging step, eval and summary rows too)."""
    try:
        obj = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise ImportFailed(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}): truncated?") from None
    history = obj.get("log_history") if isinstance(obj, dict) else None
    if not isinstance(history, list):
        raise ImportFailed(f"{path}: no log_history list (is this a transformers trainer_state.json?)")
    rows = []
    for i, entry in enumerate(history):
        if not isinstance(entry, dict):
            report.issue(f"{path.name}:log_history[{i}]", "malformed", f"a {type(entry).__name__}, not an object")
            continue
        step, key = pick_step(entry, ("step",))
        rows.append(MetricRow(step, {k: v for k, v in entry.items() if k != key}, f"{path.name}:log_history[{i}]"))
    if not rows:
        raise ImportFailed(f"{path}: log_history is empty")
    return rows


_WANDB_UI_COLUMN = re.compile(r"^.+ - (.+)$")


def read_csv(path: Path, report: ImportReport) -> list[MetricRow]:
    """A CSV export: wandb's ``run.history().to_csv()`` (``_step``, names) or the UI's panel download
    (``Step``, ``<run> - <name>``, ``<run> - <name>__MIN/__MAX``). Empty cells are absent values."""
    text = read_text(path)
    reader = csv.reader(text.splitlines())
    try:
        header = next(reader)
    except StopIteration:
        raise ImportFailed(f"{path} is empty: nothing to import") from None
    if len(header) < 2:
        raise ImportFailed(f"{path}: a CSV export needs a step column and at least one metric column; "
                           f"header is {header!r}")
    names = []
    for h in header:
        m = _WANDB_UI_COLUMN.match(h)
        names.append(m.group(1) if m and h not in STEP_KEYS else h)
    if not any(n in STEP_KEYS for n in names):
        report.notes.append(f"no step column ({', '.join(STEP_KEYS)}) in {path.name}: rows imported with step null")
    rows = []
    for i, cells in enumerate(reader, 2):
        where = f"{path.name}:{i}"
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(names):
            report.issue(where, "malformed", f"{len(cells)} cells for {len(names)} columns")
            continue
        obj: dict[str, Any] = {}
        for name, cell in zip(names, cells):
            c = cell.strip()
            if not c:
                continue
            try:
                obj[name] = float(c)
            except ValueError:
                obj[name] = c
        step, key = pick_step(obj, STEP_KEYS)
        rows.append(MetricRow(step, {k: v for k, v in obj.items() if k != key}, where))
    if not rows:
        raise ImportFailed(f"{path}: the CSV has a header but no data rows")
    return rows
