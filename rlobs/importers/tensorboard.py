"""TensorBoard event files (``SummaryWriter.add_scalar`` from torch or tensorboard, as verl's and OpenRLHF's
tensorboard loggers write them) read record by record (TFRecord framing)
and decoded with the ``tensorboard`` package's ``Event`` protobuf.

Scalars are grouped by step into rows. Both encodings are read: ``simple_value`` (torch, TF1) and
scalar ``tensor`` values (TF2 ``tf.summary``). Every record's CRCs are checked: a damaged
record is reported (``corrupt``), never decoded into a renamed tag or a wrong step; a truncated file (writer
killed) yields every complete record before the cut and an issue in the report. Needs ``pip install tensorboard``.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

from rlobs.importers.mapping import MetricRow
from rlobs.importers.report import ImportFailed, ImportReport


class _Described(str):
    """A label shown as the value's type in the import report."""


def event_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.startswith("events.out.tfevents"))
        if not files:
            raise ImportFailed(f"{path}: no events.out.tfevents.* files inside")
        return files
    if not path.exists():
        raise ImportFailed(f"{path} does not exist")
    return [path]


def _scalar(value: Any) -> float | None:
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor":
        t = value.tensor
        if t.float_val:
            return float(t.float_val[0])
        if t.double_val:
            return float(t.double_val[0])
        if t.int_val:
            return float(t.int_val[0])
        if t.int64_val:
            return float(t.int64_val[0])
        if t.tensor_content and t.dtype in (1, 2):  # DT_FLOAT, DT_DOUBLE packed
            import numpy as np

            arr = np.frombuffer(t.tensor_content, dtype=np.float32 if t.dtype == 1 else np.float64)
            return float(arr[0]) if arr.size == 1 else None
    return None


def _masked_crc32c() -> Any:
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    return masked_crc32c


def _resync(data: bytes, pos: int, crc: Any) -> int | None:
    """The next offset after ``pos`` where a record header (length + its CRC) checks out, or None."""
    size = len(data)
    for p in range(pos + 1, size - 12 + 1):
        (length,) = struct.unpack_from("<Q", data, p)
        if p + 16 + length > size:  # cheap filter before the CRC: the record must fit
            continue
        if struct.unpack_from("<I", data, p + 8)[0] == crc(data[p:p + 8]):
            return p
    return None


def records(data: bytes, *, check_crc: bool = True) -> tuple[list[tuple[int, bytes]], list[tuple[int, str, str]]]:
    """Split a TFRecord file (u64 length, masked CRC32C of the length, payload, masked CRC32C of the payload)
    into ``(offset, payload)``; CRCs are checked with tensorboard's own ``masked_crc32c`` (what its
    ``PyRecordReader`` checks). The second value lists damage as ``(offset, problem, detail)``:
    a payload whose CRC fails is skipped and reading goes on (the framing is intact); a length whose CRC
    fails is reported and reading resumes at the next offset where a record header checks out; a cut-off
    tail is ``truncated``. tensorboard's ``EventFileLoader`` would stop silently at the first of these."""
    crc = _masked_crc32c() if check_crc else None
    out: list[tuple[int, bytes]] = []
    damage: list[tuple[int, str, str]] = []
    pos, size = 0, len(data)
    while pos < size:
        if size - pos < 12:
            damage.append((pos, "truncated", f"{size - pos} trailing byte(s), not a whole record header"))
            break
        (length,) = struct.unpack_from("<Q", data, pos)
        if crc is not None and struct.unpack_from("<I", data, pos + 8)[0] != crc(data[pos:pos + 8]):
            nxt = _resync(data, pos, crc)
            skipped = (nxt if nxt is not None else size) - pos
            damage.append((pos, "corrupt", f"record length fails its CRC (length field reads {length}): "
                                           f"{skipped} byte(s) skipped" + ("" if nxt is not None else " to the end")))
            if nxt is None:
                break
            pos = nxt
            continue
        end = pos + 12 + length + 4
        if end > size:
            damage.append((pos, "truncated", f"last record cut off: {size - pos - 12} of {length + 4} byte(s) present"))
            break
        payload = data[pos + 12:pos + 12 + length]
        if crc is not None and struct.unpack_from("<I", data, pos + 12 + length)[0] != crc(payload):
            damage.append((pos, "corrupt", f"record payload fails its CRC ({length} bytes): record skipped"))
        else:
            out.append((pos, payload))
        pos = end
    return out, damage


def read(path: Path, report: ImportReport) -> list[MetricRow]:
    try:
        from google.protobuf.message import DecodeError
        from tensorboard.compat.proto import event_pb2
    except ImportError:
        raise ImportFailed("reading TensorBoard event files needs the tensorboard package: pip install tensorboard") from None
    by_step: dict[int, dict[str, Any]] = {}
    origin: dict[int, str] = {}
    report.source_format = "tensorboard"
    for f in event_files(path):
        try:
            with f.open("rb") as fh:
                # mapped, not read: a large event file costs address space, not memory
                data: Any = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if f.stat().st_size else b""
        except (OSError, ValueError) as exc:
            report.issue(f.name, "unreadable", f"cannot read: {exc}")
            continue
        payloads, damage = records(data)
        for offset, problem, detail in damage:
            report.issue(f"{f.name}:byte {offset}", problem,
                         detail + (" (writer killed?)" if problem == "truncated" else ""))
        for n, (offset, raw) in enumerate(payloads, 1):
            try:
                event = event_pb2.Event.FromString(raw)
            except (DecodeError, ValueError, RuntimeError) as exc:  # a record that passed its CRC but is no Event
                report.issue(f"{f.name}:byte {offset}", "malformed", f"{type(exc).__name__}: {exc}")
                continue
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                v = _scalar(value)
                if v is None:  # text, images, histograms: not a scalar
                    plugin = value.metadata.plugin_data.plugin_name or value.WhichOneof("value") or "empty"
                    report.count_nonnumeric(value.tag, _Described(f"{plugin} summary"))
                    continue
                by_step.setdefault(int(event.step), {})[value.tag] = v
                origin.setdefault(int(event.step), f"{f.name}:byte {offset}")
        if not payloads and not damage:
            report.issue(f.name, "unreadable", "no TensorBoard records (empty or not an event file)")
        elif not payloads:
            report.issue(f.name, "unreadable", "no TensorBoard records: none passes its CRC (not an event file, or damaged)")
    if not by_step:
        raise ImportFailed(f"{path}: no scalar summaries in the event file(s)"
                           + (f" ({report.issues[-1].detail})" if report.issues else ""))
    return [MetricRow(step, by_step[step], origin[step]) for step in sorted(by_step)]
