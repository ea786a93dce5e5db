"""Reading files of a run record that may be damaged or hostile.

A record is input: anyone can hand ``rlobs info`` / the doctor / the app a directory. Everything here
refuses what is not a regular file (FIFOs, devices, sockets, symlinks) *before* reading it, opens
without blocking and without following links, caps how much JSON it reads, and turns every failure
(including JSON nested deeper than the parser's recursion limit) into :class:`RecordFileError`.

Whole-file checksums: when a segment is sealed, the SHA-256 of its Parquet bytes is written to
``events/.sha256/<kind>/<segment>.sha256`` (before the segment appears under its final name), so a
verifying reader can prove a segment is byte-for-byte what the writer wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

MAX_MANIFEST_BYTES = 8 << 20
MAX_PROCESS_FILE_BYTES = 1 << 20
CHECKSUM_DIR = ".sha256"
GLOB_CHARS = frozenset("*?[]{}")


class RecordFileError(Exception):
    """A file of the record cannot be read safely; the message says why, for the user."""


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def regular(path: Path) -> os.stat_result:
    """``lstat`` of ``path`` if it is a regular file (not a link to one); else RecordFileError."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise RecordFileError(f"{path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise RecordFileError(f"{path} is {file_kind(st.st_mode)}, not a regular file: not read")
    return st


def read_capped(path: Path, cap: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``cap`` of them (more is an error). Never blocks on a
    FIFO and never follows a symlink, even one swapped in after a check."""
    regular(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise RecordFileError(f"{path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RecordFileError(f"{path} is {file_kind(st.st_mode)}, not a regular file: not read")
        if st.st_size > cap:
            raise RecordFileError(f"{path} is {st.st_size:,} bytes, over the {cap:,}-byte limit for this file: not read")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise RecordFileError(f"{path} grew past the {cap:,}-byte limit for this file: not read")
        return b"".join(chunks)
    except OSError as exc:
        raise RecordFileError(f"{path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_json(path: Path, cap: int) -> Any:
    raw = read_capped(path, cap)
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RecordFileError(f"{path} is not UTF-8 text: {exc}") from None
    except json.JSONDecodeError as exc:
        raise RecordFileError(f"{path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise RecordFileError(f"{path}: JSON nested too deeply to read") from None


def has_glob(path: str) -> bool:
    """DuckDB expands glob patterns in file names it is given; such names must never reach it."""
    return any(c in GLOB_CHARS for c in path)


def checksum_path(segment: Path) -> Path:
    """``events/<kind>/<name>.parquet`` -> ``events/.sha256/<kind>/<name>.parquet.sha256``."""
    return segment.parent.parent / CHECKSUM_DIR / segment.parent.name / (segment.name + ".sha256")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


def write_checksum(segment_tmp: Path, final: Path) -> None:
    """Record the SHA-256 of ``segment_tmp`` for the segment that will be renamed to ``final``."""
    target = checksum_path(final)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name("." + target.name + ".tmp")
    tmp.write_text(sha256_file(segment_tmp) + "\n")
    os.replace(tmp, target)


def check_checksum(segment: Path) -> str | None | bool:
    """None when the segment's bytes match its recorded checksum, an error text when they do not,
    False when no checksum was recorded (an older record, or sealed by something else)."""
    side = checksum_path(segment)
    try:
        want = read_capped(side, 256).decode("ascii", "replace").strip()
    except RecordFileError:
        if not os.path.lexists(side):
            return False
        return f"its checksum file {side.name} cannot be read"
    try:
        got = sha256_file(segment)
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    if got != want:
        return "its bytes differ from those written when it was sealed (SHA-256 mismatch)"
    return None
