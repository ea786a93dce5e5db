"""Data access for the app: one ``RunData`` per run directory, caching query results until the record changes.

``RunData`` opens the record (``rlobs.open_run``), memoises every query by name and arguments, and
knows the record's *fingerprint* (names, sizes and mtimes of its segment and process files): ``refresh()``
reopens the record and drops the cache only when the fingerprint changed (a run still being written).
A record that cannot be opened at all (no or bad manifest) becomes ``RunData.error`` instead of an
exception; segments that could not be read in full are in ``RunData.problems``. Queries run under a lock
because Streamlit sessions share one instance across threads and a DuckDB connection is not thread-safe.
No streamlit import here: the benchmark and the tests use it directly.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlobs.app import queries


def fingerprint(path: Path) -> str:
    """Digest of (relative name, size, mtime) of every file under events/ and processes/, plus the manifest."""
    h = hashlib.blake2b(digest_size=12)
    for sub in ("manifest.json", "events", "processes"):
        top = path / sub
        stack = [top]
        while stack:
            p = stack.pop()
            try:
                if p.is_dir():
                    stack.extend(sorted(p.iterdir(), reverse=True))
                    continue
                st = p.stat()
            except OSError:
                continue
            h.update(f"{p.relative_to(path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


class RunData:
    """A run record opened for the app, with a query cache invalidated by ``refresh()``."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._lock = threading.RLock()
        self._cache: dict[tuple[Any, ...], Any] = {}
        self.record: Any = None
        self.error: str | None = None
        self.fingerprint = ""
        self.opened_at = 0.0
        self._open()

    # ---- lifecycle ----
    def _open(self) -> None:
        from rlobs.store import RunRecordError, open_run

        if self.record is not None:
            self.record.close()
        self.record, self.error = None, None
        self._cache.clear()
        self.fingerprint = fingerprint(self.path)
        try:
            self.record = open_run(self.path)
        except (RunRecordError, OSError, ValueError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - a damaged file the reader did not anticipate: say so, never crash
            self.error = f"could not open the record: {type(exc).__name__}: {exc}"
        self.opened_at = time.time()

    def changed(self) -> bool:
        return fingerprint(self.path) != self.fingerprint

    def refresh(self, force: bool = False) -> bool:
        """Reopen if the files changed (or ``force``); True when it reopened."""
        with self._lock:
            if force or self.changed():
                self._open()
                return True
            return False

    def close(self) -> None:
        with self._lock:
            if self.record is not None:
                self.record.close()
                self.record = None

    # ---- cached access ----
    @property
    def ok(self) -> bool:
        return self.record is not None

    def cached(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        key = (name, *args)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = fn(self.record, *args)
            return self._cache[key]

    def q(self, name: str, *args: Any) -> Any:
        """A cached call of ``queries.<name>(record, *args)`` (arguments must be hashable)."""
        return self.cached(name, getattr(queries, name), *args)

    def samples_page(self, f: queries.SampleFilter, limit: int = 200, offset: int = 0) -> Any:
        key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in asdict(f).items()))
        return self.cached("samples_page", lambda rec, *_: queries.samples_page(rec, f, limit, offset),
                           key, limit, offset)

    @property
    def run_id(self) -> str:
        return self.record.run_id if self.record is not None else self.path.name

    @property
    def problems(self) -> list[Any]:
        return list(self.record.problems) if self.record is not None else []

    @property
    def processes(self) -> list[Any]:
        return list(self.record.processes) if self.record is not None else []

    @property
    def still_running(self) -> bool:
        return any(p.status == "running" for p in self.processes)

    def info(self) -> dict[str, Any]:
        return self.cached("info", lambda rec: rec.info())

    def report(self) -> Any:
        """The doctor's report (all rules), cached until the record changes."""
        from rlobs.doctor import diagnose

        return self.cached("report", lambda rec: diagnose(rec))

    def steps(self) -> tuple[int, int] | None:
        return self.q("step_bounds")
