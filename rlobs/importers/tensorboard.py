"""TensorBoard event files (``SummaryWriter.add_scalar`` from torch or tensorboard, as verl's and OpenRLHF's
tensorboard loggers write them) read record by record (TFRecord framing)
and decoded with the ``tensorboard`` package's ``Event`` protobuf.

Scalars are grouped by step into rows. Both encodings are read: ``simple_value`` (torch, TF1) and
scalar ``tensor`` values (TF2 ``tf.summary``). A truncated file (writer killed) yields every complete
record before the damage and an issue in the report. Needs ``pip install tensorboard``.
"""

from __future__ import annotations

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


def records(data: bytes) -> tuple[list[bytes], str | None]:
    """Split a TFRecord file (u64 length, u32 crc, payload, u32 crc) into payloads; the second value
    describes a truncated tail (None when the file ends on a record boundary). CRCs are not checked: a
    damaged payload fails to parse instead."""
    out: list[bytes] = []
    pos, size = 0, len(data)
    while pos < size:
        if size - pos < 12:
            return out, f"{size - pos} trailing byte(s), not a whole record header"
        (length,) = struct.unpack_from("<Q", data, pos)
        end = pos + 12 + length + 4
        if end > size:
            return out, f"last record cut off: {size - pos - 12} of {length + 4} byte(s) present"
        out.append(data[pos + 12:pos + 12 + length])
        pos = end
    return out, None


def read(path: Path, report: ImportReport) -> list[MetricRow]:
    try:
        from tensorboard.compat.proto import event_pb2
    except ImportError:
        raise ImportFailed("reading TensorBoard event files needs the tensorboard package: pip install tensorboard") from None
    by_step: dict[int, dict[str, Any]] = {}
    origin: dict[int, str] = {}
    report.source_format = "tensorboard"
    for f in event_files(path):
        payloads, tail = records(f.read_bytes())
        if tail is not None:
            report.issue(f"{f.name}:record {len(payloads) + 1}", "truncated", tail + " (writer killed?)")
        for n, raw in enumerate(payloads, 1):
            try:
                event = event_pb2.Event.FromString(raw)
            except Exception as exc:  # protobuf DecodeError: a damaged record
                report.issue(f"{f.name}:record {n}", "malformed", f"{type(exc).__name__}: {exc}")
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
                origin.setdefault(int(event.step), f"{f.name}:record {n}")
        if not payloads:
            report.issue(f.name, "unreadable", "no TensorBoard records (empty or not an event file)")
    if not by_step:
        raise ImportFailed(f"{path}: no scalar summaries in the event file(s)"
                           + (f" ({report.issues[-1].detail})" if report.issues else ""))
    return [MetricRow(step, by_step[step], origin[step]) for step in sorted(by_step)]
