"""In-memory sink: keeps every event as a dict, for tests and for users who want to inspect."""

from __future__ import annotations

import threading
from typing import Any

from rlobs.events import EventBatch


class MemorySink:
    name = "memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self.batches = 0
        self.closed = False

    def write(self, batch: EventBatch) -> None:
        rows = [dict(kind=kind, **row) for kind in batch.kinds() for row in batch.rows(kind)]
        with self._lock:
            self.events.extend(rows)
            self.batches += 1

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e["kind"] == kind]

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True
