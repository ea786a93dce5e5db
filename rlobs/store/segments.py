"""Append-only event segments of one process: Arrow IPC streams sealed into Parquet.

Layout inside a run directory::

    events/<kind>/<process>.<seq>.arrows    open segment: an Arrow IPC *stream*, one record batch per flush
    events/<kind>/<process>.<seq>.parquet   sealed segment (zstd), written when the stream is rotated or closed

Why two formats: an IPC stream is appendable and every flushed batch is complete on disk the moment
``write`` returns (unbuffered file; a SIGKILL loses only what was still queued in memory, and a
half-written last batch is detected and skipped by the reader). Parquet is what DuckDB and any Arrow
engine read fastest, from local disk or object storage. Sealing writes ``.parquet`` to a temp name,
renames it into place and only then removes the ``.arrows``; a reader that sees both trusts the Parquet.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rlobs.schema import arrow_schema
from rlobs.store.safeio import write_checksum

ARROWS = ".arrows"
PARQUET = ".parquet"


def segment_stem(process: str, seq: int) -> str:
    return f"{process}.{seq:05d}"


def seal(arrows_path: Path) -> Path | None:
    """Convert a complete or truncated IPC stream into Parquet; return the Parquet path (None if empty)."""
    from rlobs.store.reader import read_stream  # local: reader imports this module

    table, _problem = read_stream(arrows_path)
    out = arrows_path.with_suffix(PARQUET)
    if table is None or table.num_rows == 0:
        arrows_path.unlink(missing_ok=True)
        return None
    tmp = out.with_name("." + out.name + ".tmp")
    # page checksums let `open_run(verify=True)` detect flipped bytes that decompress cleanly
    pq.write_table(table, tmp, compression="zstd", row_group_size=256 * 1024, write_page_checksum=True)
    write_checksum(tmp, out)  # the whole-file SHA-256, in place before the segment appears under its name
    os.replace(tmp, out)
    arrows_path.unlink(missing_ok=True)
    return out


class SegmentWriter:
    """Writes one kind's events of one process, rotating and sealing segments."""

    def __init__(self, kind_dir: Path, kind: str, process: str, *, max_bytes: int = 64 << 20,
                 max_seconds: float = 600.0, seal_on_close: bool = True):
        self.kind_dir = kind_dir
        self.kind = kind
        self.process = process
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds
        self.seal_on_close = seal_on_close
        self.schema = arrow_schema(kind)
        self._seq = 0
        self._file: Any = None
        self._writer: Any = None
        self._path: Path | None = None
        self._opened = 0.0
        self.rows_written = 0

    def _open(self) -> None:
        self.kind_dir.mkdir(parents=True, exist_ok=True)
        while True:
            path = self.kind_dir / (segment_stem(self.process, self._seq) + ARROWS)
            if not path.exists() and not path.with_suffix(PARQUET).exists():
                break
            self._seq += 1
        self._path = path
        self._file = pa.OSFile(str(path), "wb")  # unbuffered: each batch reaches the OS on write
        self._writer = pa.ipc.new_stream(self._file, self.schema)
        self._opened = time.monotonic()

    def write(self, batch: Any) -> None:
        if batch.num_rows == 0:
            return
        if self._writer is None:
            self._open()
        self._writer.write_batch(batch)
        self.rows_written += batch.num_rows
        if self._file.tell() >= self.max_bytes or time.monotonic() - self._opened >= self.max_seconds:
            self.rotate()

    def rotate(self) -> Path | None:
        """Close the open segment (writing the end-of-stream marker) and seal it into Parquet."""
        if self._writer is None:
            return None
        path = self._path
        try:
            self._writer.close()
        finally:
            self._file.close()
            self._writer = self._file = self._path = None
            self._seq += 1
        assert path is not None
        return seal(path) if self.seal_on_close else path

    def close(self) -> None:
        self.rotate()
