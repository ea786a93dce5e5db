"""wandb's own run file, ``run-<id>.wandb`` (what wandb >= 0.16 writes, offline or online; there is no
``wandb-history.jsonl`` any more), read with the protobuf definitions the ``wandb`` package ships
(``pip install 'rlobs[importers]'`` brings wandb; nothing connects to wandb's servers).

Layout (verified against wandb 0.31 here): a 7-byte header (``:W&B``, 2-byte magic, 1-byte version), then
LevelDB-log framing: 32 KiB blocks counted from the start of the file; each chunk is a 7-byte header
(CRC32 uint32 LE of the type byte + data, zlib's IEEE polynomial, unmasked; length uint16 LE; type 1 full,
2 first, 3 middle, 4 last) and its bytes; a block tail shorter than a chunk header is zero padding. Each
record is a ``wandb_internal_pb2.Record``; ``wandb.log`` rows are ``record.history.item[]`` with ``key`` or
``nested_key`` (joined with ``/``, as wandb shows them) and ``value_json``; ``_step`` is among them.

Damage is reported, never guessed through: a chunk whose CRC fails is ``corrupt`` and the record it belongs
to is skipped (reading resumes at the next chunk, or the next block when the length is damaged); a file that
ends mid-record (a run still writing, a killed writer) is ``truncated``.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlobs.importers.mapping import MetricRow, pick_step
from rlobs.importers.readers import MAX_KEYS, load_json
from rlobs.importers.report import ImportFailed, ImportReport

MAGIC = b":W&B"
FILE_HEADER = 7
BLOCK = 32768
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
MAX_RECORD = 64 * 1024 * 1024  # a history row is KBs; a larger record is skipped (and reported), not assembled


def is_wandb_file(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def run_files(path: Path) -> list[Path]:
    """``run-*.wandb`` files in a run folder (or the wandb/ folder above several runs), oldest first."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*.wandb") if p.is_file())


def chunks_to_records(data: Any, name: str, report: ImportReport, start_at: int = FILE_HEADER,
                      ends: list[int] | None = None) -> Iterator[tuple[int, bytes]]:
    """(offset, record bytes) for each whole record whose chunks all pass their CRC, from ``start_at`` (a chunk
    boundary); ``ends`` (if given) receives the offset after each yielded record (a resume point)."""
    size = len(data)
    if size < FILE_HEADER or bytes(data[:4]) != MAGIC:
        raise ImportFailed(f"{name}: not a wandb run file (no ':W&B' header)")
    pos = max(FILE_HEADER, start_at)
    parts: list[bytes] = []
    start: int | None = None
    while pos < size:
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < CHUNK_HEADER:  # zero padding at a block's end
            pos += left_in_block
            continue
        if size - pos < CHUNK_HEADER:
            report.issue(f"{name}:byte {pos}", "truncated", f"{size - pos} trailing byte(s), not a whole chunk header")
            return
        crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if crc == 0 and length == 0 and kind == 0:  # zero-filled rest of a block (preallocated, or padding)
            pos += left_in_block
            continue
        end = pos + CHUNK_HEADER + length
        if length > left_in_block - CHUNK_HEADER or kind not in (FULL, FIRST, MIDDLE, LAST):
            report.issue(f"{name}:byte {pos}", "corrupt",
                         f"chunk header damaged (length {length}, type {kind}): the rest of this 32 KiB block skipped")
            parts, start = [], None
            pos += left_in_block
            continue
        if end > size:
            report.issue(f"{name}:byte {pos}", "truncated",
                         f"last record cut off: {size - pos - CHUNK_HEADER} of {length} byte(s) present (run still writing?)")
            return
        body = bytes(data[pos + CHUNK_HEADER:end])
        if zlib.crc32(body, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
            report.issue(f"{name}:byte {pos}", "corrupt", f"chunk fails its CRC ({length} bytes): its record skipped")
            parts, start = [], None
            pos = end
            continue
        if kind == FULL:
            if parts:
                report.issue(f"{name}:byte {start}", "corrupt", "record without its last chunk: skipped")
            parts, start = [], None
            if ends is not None:
                ends.append(end)
            yield pos, body
        elif kind == FIRST:
            if parts:
                report.issue(f"{name}:byte {start}", "corrupt", "record without its last chunk: skipped")
            parts, start = [body], pos
        elif not parts:
            report.issue(f"{name}:byte {pos}", "corrupt", "chunk continues a record whose start is missing: skipped")
        elif kind == MIDDLE:
            parts.append(body)
        else:
            parts.append(body)
            if ends is not None:
                ends.append(end)
            yield start if start is not None else pos, b"".join(parts)
            parts, start = [], None
        if parts and len(parts) * BLOCK > MAX_RECORD:
            report.issue(f"{name}:byte {start}", "oversized", f"record over {MAX_RECORD} bytes skipped")
            parts, start = [], None
            pos = end
            while pos < size:  # skip its remaining chunks
                left = BLOCK - pos % BLOCK
                if left < CHUNK_HEADER:
                    pos += left
                    continue
                if size - pos < CHUNK_HEADER:
                    break
                _crc, length, kind = struct.unpack_from("<IHB", data, pos)
                if kind not in (MIDDLE, LAST):
                    break
                pos += CHUNK_HEADER + length
                if kind == LAST:
                    break
            continue
        pos = end
    if parts:
        report.issue(f"{name}:byte {start}", "truncated", "last record cut off (run still writing?)")


def history_row(history: Any, where: str, report: ImportReport) -> MetricRow | None:
    values: dict[str, Any] = {}
    if len(history.item) > MAX_KEYS:
        report.issue(where, "oversized", f"{len(history.item)} names in one row skipped (limit {MAX_KEYS})")
        return None
    for item in history.item:
        key = "/".join(item.nested_key) if item.nested_key else item.key
        value, why = load_json(item.value_json)
        if why is not None:
            report.issue(where, "malformed", f"{key}: {why}")
            continue
        values[key] = value
    step, key = pick_step(values, ("_step",))
    if step is None and history.HasField("step"):
        step = int(history.step.num)
    return MetricRow(step, values, where)


def read(path: Path, report: ImportReport) -> list[MetricRow]:
    try:
        from google.protobuf.message import DecodeError
        from wandb.proto import wandb_internal_pb2
    except ImportError:
        raise ImportFailed("reading wandb run files (run-<id>.wandb) needs the wandb package: "
                           "pip install 'rlobs[importers]' (or pip install wandb)") from None
    files = run_files(path)
    if not files:
        raise ImportFailed(f"{path}: no run-<id>.wandb file inside")
    if len(files) > 1:
        raise ImportFailed(f"{path} holds {len(files)} wandb runs ({', '.join(str(f.parent.name) for f in files[:5])}"
                           f"{', ...' if len(files) > 5 else ''}); give one run folder")
    report.source = str(files[0] if len(files) == 1 else path)
    report.source_format = "wandb-run-file"
    rows: list[MetricRow] = []
    counts: dict[str, int] = {}
    for f in files:
        try:
            with f.open("rb") as fh:
                data: Any = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if f.stat().st_size else b""
        except (OSError, ValueError) as exc:
            report.issue(f.name, "unreadable", f"cannot read: {exc}")
            continue
        for offset, raw in chunks_to_records(data, f.name, report):
            where = f"{f.name}:byte {offset}"
            try:
                record = wandb_internal_pb2.Record.FromString(raw)
            except (DecodeError, ValueError, RuntimeError) as exc:
                report.issue(where, "malformed", f"not a wandb Record: {type(exc).__name__}: {exc}")
                continue
            kind = record.WhichOneof("record_type") or "empty"
            counts[kind] = counts.get(kind, 0) + 1
            if kind == "history":
                row = history_row(record.history, where, report)
                if row is not None:
                    rows.append(row)
    if counts:
        report.notes.append("wandb records: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                            + " (history rows imported; config, summary, console and system stats are not metrics)")
    if not rows:
        raise ImportFailed(f"{path}: no history rows (wandb.log calls) in the run file"
                           + (f" ({report.issues[-1].problem}: {report.issues[-1].detail})" if report.issues else ""))
    return rows
