"""A compacted copy of a kind's many small sealed segments, cached outside the record.

A record whose kind is split into thousands of small segments costs about a millisecond or more per file
to decode, every time it is opened. The reader decodes them once, then keeps their rows as one Arrow IPC
file under ``$RLOBS_CACHE/compact`` (default ``~/.cache/rlobs/compact``), keyed by every file's path, size,
inode, mtime and ctime (a rewrite changes ctime even when mtime is forged), the schema version and the
pyarrow version. The record itself is never written; a failing cache (read-only home) only costs speed.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path
from typing import Any

import pyarrow as pa

from rlobs.schema import SCHEMA_VERSION

FORMAT = "1"
KEEP = 64  # cache entries kept (newest first)


def cache_dir() -> Path:
    return Path(os.environ.get("RLOBS_CACHE", Path.home() / ".cache" / "rlobs")) / "compact"


def key(kind: str, files: list[tuple[Path, os.stat_result]]) -> str:
    h = hashlib.sha256(json.dumps([FORMAT, SCHEMA_VERSION, pa.__version__, kind]).encode())
    for f, st in files:
        h.update(f"{os.path.realpath(f)}\0{st.st_size}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode())
    return h.hexdigest()


def load(k: str) -> tuple[pa.Table, list[str], list[dict[str, Any]]] | None:
    path = cache_dir() / f"{k}.arrow"
    try:
        with pa.memory_map(str(path), "r") as src:
            table = pa.ipc.open_file(src).read_all()
        meta = table.schema.metadata or {}
        names = json.loads(meta[b"rlobs.compact.names"])
        problems = json.loads(meta[b"rlobs.compact.problems"])
        os.utime(path)  # recently used
        return table.replace_schema_metadata(None), names, problems
    except (OSError, KeyError, ValueError, pa.ArrowException):
        return None


def save(k: str, table: pa.Table, names: list[str], problems: list[dict[str, Any]]) -> None:
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{k}.{secrets.token_hex(4)}.tmp"
        meta = {b"rlobs.compact.names": json.dumps(names).encode(),
                b"rlobs.compact.problems": json.dumps(problems).encode()}
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema.with_metadata(meta)) as w:
            w.write_table(table)
        os.replace(tmp, d / f"{k}.arrow")
        entries = sorted(d.glob("*.arrow"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[KEEP:]:
            old.unlink(missing_ok=True)
    except (OSError, pa.ArrowException):
        pass  # only speed is lost
