"""Text log readers: JSONL (verl's file logger, TRL / generic JSON lines, wandb-history.jsonl), console
output (verl's ``step:N - k:v`` lines, TRL's printed dicts), TRL's ``trainer_state.json``, CSV exports.

Each reader returns ``MetricRow``s and records every line it could not read in the ``ImportReport``
(malformed, truncated last line); it raises ``ImportFailed`` only when nothing at all could be read.
``sniff`` names the format of a file from its first lines.

Hostile input is bounded, never a traceback: files are read line by line (a line longer than
``MAX_LINE_BYTES`` is skipped unread and reported as ``oversized``), a row with more than ``MAX_KEYS``
names is reported and skipped, JSON nested too deep for the parser and integers beyond float64 are
reported per line, CSV cells beyond ``csv.field_size_limit()`` are reported per row.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlobs.importers.mapping import STEP_KEYS, MetricRow, pick_step
from rlobs.importers.report import ImportFailed, ImportReport

VERL_CONSOLE = re.compile(r"step:(\d+) - (.*)$")
_BARE_NONFINITE = re.compile(r"(?<=[:\s,\[])(-?inf|nan)(?=\s*[,}\]])")
_SNIFF_LINES = 200
MAX_LINE_BYTES = 4 * 1024 * 1024  # verl logs a few hundred metrics per line: ~30 KiB
MAX_KEYS = 20_000  # names in one row (after flattening)
MAX_DEPTH = 16  # nested metric dicts deeper than this are counted as not numbers
MAX_JSON_FILE_BYTES = 512 * 1024 * 1024  # trainer_state.json is parsed whole
_HEAD_BYTES = 1024 * 1024
_CHUNK = 1024 * 1024


class _Described(str):
    """A value that is not a number, with the label the import report shows for it."""


class _BigInt(Exception):
    pass


def _parse_int(text: str) -> Any:
    if len(text.lstrip("-")) > 300:  # beyond float64; int() refuses > 4300 digits and is quadratic before
        return _Described(f"integer with {len(text.lstrip('-'))} digits (beyond float64)")
    return int(text)


def number_or_text(text: str) -> float | str:
    """A logged number as float; anything else (or a number beyond float64, e.g. 5000 digits) as the text."""
    try:
        v = float(text)
    except ValueError:
        return text
    if math.isinf(v) and "inf" not in text.lower():
        return text
    return v


def load_json(text: str) -> tuple[Any, str | None]:
    """``json.loads`` that never raises: (object, None) or (None, why it could not be read)."""
    try:
        return json.loads(text, parse_int=_parse_int), None
    except json.JSONDecodeError as exc:
        return None, f"{exc.msg}: {text[:120]!r}"
    except RecursionError:
        return None, "JSON nested deeper than the parser allows (~1000 levels)"
    except (ValueError, MemoryError) as exc:
        return None, f"{type(exc).__name__}: {str(exc)[:200]}"


def _open(path: Path):
    try:
        return path.open("rb")
    except OSError as exc:
        raise ImportFailed(f"cannot read {path}: {exc}") from None


def read_head(path: Path, size: int = _HEAD_BYTES) -> bytes:
    with _open(path) as f:
        try:
            return f.read(size)
        except OSError as exc:
            raise ImportFailed(f"cannot read {path}: {exc}") from None


def check_text(path: Path) -> None:
    """ImportFailed for an empty or binary file (from its first bytes; a file of only blank lines is empty)."""
    head = read_head(path, 4096)
    if b"\x00" in head:
        raise ImportFailed(f"{path} is a binary file, not a text log (TensorBoard event files: "
                           "`rlobs import tensorboard PATH`)")
    if not head.strip():
        with _open(path) as f:
            while chunk := f.read(_CHUNK):
                if chunk.strip():
                    return
        raise ImportFailed(f"{path} is empty: nothing to import")


def iter_lines(path: Path, report: ImportReport) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, complete) for each line, streamed; the last line is incomplete when the file
    does not end with a newline. Lines over MAX_LINE_BYTES are reported as oversized and skipped unread."""
    check_text(path)
    with _open(path) as f:
        n = 0
        while True:
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            n += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                size = len(raw)
                while True:  # skip the rest of the line without holding it
                    part = f.readline(_CHUNK)
                    size += len(part)
                    if not part or part.endswith(b"\n"):
                        break
                report.issue(f"{path.name}:{n}", "oversized",
                             f"line of {size} bytes skipped unread (limit {MAX_LINE_BYTES} bytes per line)")
                continue
            complete = raw.endswith(b"\n")
            yield n, raw.decode("utf-8", errors="replace").rstrip("\r\n"), complete


def read_text(path: Path, limit: int = MAX_JSON_FILE_BYTES) -> str:
    """A whole (small) text file; ImportFailed beyond ``limit`` bytes."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise ImportFailed(f"{path} is {size} bytes; a file read whole may have at most {limit}")
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
    check_text(path)
    raw_head = read_head(path)
    head = raw_head.decode("utf-8", errors="replace")
    stripped = head.lstrip()
    if (path.suffix == ".json" or stripped.startswith("{\n")) and '"log_history"' in head:
        return "trl-state"
    if path.suffix == ".csv":
        return "csv"
    if len(raw_head) == _HEAD_BYTES and stripped.startswith("{") and "\n" not in stripped:
        # one line longer than the head: JSON lines (the reader reports the line if it is oversized)
        return "jsonl"
    text = head
    lines = [ln for ln in text.splitlines()[:_SNIFF_LINES * 50] if ln.strip()]
    for ln in lines:
        s = ln.strip()
        if s.startswith("{"):
            _obj, why = load_json(s)
            if why is None or "nested deeper" in why:
                return "jsonl"
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


def flatten(obj: dict[str, Any], prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """Nested metric dicts as ``a/b`` names; wandb media / table objects (``_type``) stay whole, and so do
    dicts nested deeper than MAX_DEPTH (counted as not numbers)."""
    out: dict[str, Any] = {}
    for k, v in obj.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and v and "_type" not in v:
            if depth >= MAX_DEPTH:
                out[name] = _Described(f"dict nested deeper than {MAX_DEPTH} levels")
                continue
            out.update(flatten(v, f"{name}/", depth + 1))
        else:
            out[name] = v
    return out


def _too_many_keys(row: MetricRow, report: ImportReport) -> bool:
    if len(row.values) > MAX_KEYS:
        report.issue(row.origin, "oversized", f"{len(row.values)} names in one row skipped (limit {MAX_KEYS})")
        return True
    return False


def read_jsonl(path: Path, report: ImportReport) -> list[MetricRow]:
    rows: list[MetricRow] = []
    for i, line, complete in iter_lines(path, report):
        s = line.strip()
        if not s:
            continue
        where = f"{path.name}:{i}"
        obj, why = load_json(s)
        if why is not None:
            report.issue(where, "malformed" if complete else "truncated",
                         ("last line cut off (writer killed?): " if not complete else "") + why)
            continue
        if not isinstance(obj, dict):
            report.issue(where, "malformed", f"a JSON {type(obj).__name__}, not an object")
            continue
        row = _row_from_object(obj, where)
        if not _too_many_keys(row, report):
            rows.append(row)
    if not rows:
        raise ImportFailed(f"{path}: no readable JSON object lines ({len(report.issues)} issue(s): "
                           + "; ".join(f"{i.where} {i.problem}: {i.detail[:100]}" for i in report.issues[:3]) + ")")
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
        values[name.strip()] = number_or_text(raw.strip())
    return int(m.group(1)), values


def parse_python_dict(line: str) -> dict[str, Any] | None:
    """A dict printed by Python (TRL / transformers console logs); literals only, never eval."""
    start, end = line.find("{"), line.rfind("}")
    if start < 0 or end <= start:
        return None
    body = _BARE_NONFINITE.sub(lambda m: repr(m.group(1)), line[start:end + 1])
    try:
        obj = ast.literal_eval(body)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    return obj if isinstance(obj, dict) else None


def read_console(path: Path, report: ImportReport, *, training_keys: frozenset[str] = frozenset()) -> list[MetricRow]:
    """verl ``step:N - k:v`` lines and printed dicts; other lines (progress bars, warnings) are skipped and
    counted. Printed dicts carry no step: rows with a training key get the next ordinal step."""
    rows: list[MetricRow] = []
    other = 0
    ordinal = 0
    dict_rows = 0
    for i, raw_line, _complete in iter_lines(path, report):
        line = raw_line.split("\r")[-1].strip()  # tqdm redraws with \r
        if not line:
            continue
        where = f"{path.name}:{i}"
        parsed = parse_verl_console(line)
        if parsed is not None:
            row = MetricRow(parsed[0], parsed[1], where)
            if not _too_many_keys(row, report):
                rows.append(row)
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
            row = MetricRow(step, {k: v for k, v in obj.items() if k != key}, where)
            if not _too_many_keys(row, report):
                rows.append(row)
            continue
        other += 1
    if not rows:
        raise ImportFailed(f"{path}: no metric lines among {other} console line(s)"
                           + (f" ({len(report.issues)} unreadable)" if report.issues else ""))
    if dict_rows:
        report.notes.append(f"{dict_rows} printed dict(s) carry no step: steps 1..{ordinal} were assigned in line "
                            "order (exact if logging_steps=1; trainer_state.json has the real steps)")
    if other:
        report.notes.append(f"{other} console line(s) without metrics were skipped (progress bars, messages)")
    return rows


def read_trl_state(path: Path, report: ImportReport) -> list[MetricRow]:
    """``trainer_state.json``: its ``log_history`` (one dict per logging step, eval and summary rows too)."""
    obj, why = load_json(read_text(path))
    if why is not None:
        raise ImportFailed(f"{path}: not readable as JSON ({why[:200]}); truncated or damaged?")
    history = obj.get("log_history") if isinstance(obj, dict) else None
    if not isinstance(history, list):
        raise ImportFailed(f"{path}: no log_history list (is this a transformers trainer_state.json?)")
    rows = []
    for i, entry in enumerate(history):
        if not isinstance(entry, dict):
            report.issue(f"{path.name}:log_history[{i}]", "malformed", f"a {type(entry).__name__}, not an object")
            continue
        step, key = pick_step(entry, ("step",))
        row = MetricRow(step, flatten({k: v for k, v in entry.items() if k != key}), f"{path.name}:log_history[{i}]")
        if not _too_many_keys(row, report):
            rows.append(row)
    if not rows:
        raise ImportFailed(f"{path}: log_history is empty")
    return rows


_WANDB_UI_COLUMN = re.compile(r"^.+ - (.+)$")


def read_csv(path: Path, report: ImportReport) -> list[MetricRow]:
    """A CSV export: wandb's ``run.history().to_csv()`` (``_step``, names) or the UI's panel download
    (``Step``, ``<run> - <name>``, ``<run> - <name>__MIN/__MAX``). Empty cells are absent values."""
    check_text(path)
    with path.open(newline="", encoding="utf-8", errors="replace") as f:
        return _read_csv_rows(path, csv.reader(f), report)


def _read_csv_rows(path: Path, reader: Any, report: ImportReport) -> list[MetricRow]:
    header: list[str] | None = None
    while header is None:
        try:
            header = next(reader)
        except StopIteration:
            raise ImportFailed(f"{path} is empty: nothing to import") from None
        except csv.Error as exc:
            raise ImportFailed(f"{path}: the CSV header is unreadable ({exc})") from None
    if len(header) < 2:
        raise ImportFailed(f"{path}: a CSV export needs a step column and at least one metric column; "
                           f"header is {header[:5]!r}")
    if len(header) > MAX_KEYS:
        raise ImportFailed(f"{path}: {len(header)} columns (limit {MAX_KEYS})")
    names = []
    for h in header:
        m = _WANDB_UI_COLUMN.match(h)
        names.append(m.group(1) if m and h not in STEP_KEYS else h)
    if not any(n in STEP_KEYS for n in names):
        report.notes.append(f"no step column ({', '.join(STEP_KEYS)}) in {path.name}: rows imported with step null")
    rows = []
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:  # a cell beyond csv.field_size_limit(), a NUL byte, ...
            report.issue(f"{path.name}:{reader.line_num}", "malformed", f"CSV row unreadable: {exc}")
            continue
        where = f"{path.name}:{reader.line_num}"
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
            obj[name] = number_or_text(c)
        step, key = pick_step(obj, STEP_KEYS)
        rows.append(MetricRow(step, {k: v for k, v in obj.items() if k != key}, where))
    if not rows:
        raise ImportFailed(f"{path}: the CSV has a header but no data rows")
    return rows
