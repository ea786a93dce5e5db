"""Run-store sink: appends each kind's events to this process's segments in the run directory."""

from __future__ import annotations

from pathlib import Path

from rlobs.events import EventBatch
from rlobs.store.manifest import EVENTS_DIR
from rlobs.store.segments import SegmentWriter


class RunStoreSink:
    name = "runstore"

    def __init__(self, run_dir: Path, process: str, *, segment_bytes: int = 64 << 20,
                 segment_seconds: float = 600.0):
        self.run_dir = Path(run_dir)
        self.process = process
        self.segment_bytes = segment_bytes
        self.segment_seconds = segment_seconds
        self._writers: dict[str, SegmentWriter] = {}
        self.invalid_events = 0

    def _writer(self, kind: str) -> SegmentWriter:
        w = self._writers.get(kind)
        if w is None:
            w = SegmentWriter(self.run_dir / EVENTS_DIR / kind, kind, self.process,
                              max_bytes=self.segment_bytes, max_seconds=self.segment_seconds)
            self._writers[kind] = w
        return w

    def write(self, batch: EventBatch) -> None:
        for kind in batch.kinds():
            writer = self._writer(kind)
            for rb in batch.record_batches(kind):
                writer.write(rb)

    def flush(self) -> None:
        pass  # every batch is written unbuffered

    def close(self) -> None:
        errors = []
        for w in self._writers.values():
            try:
                w.close()
            except Exception as exc:  # keep closing the others
                errors.append(f"{w.kind}: {exc}")
        if errors:
            raise OSError("could not seal segments: " + "; ".join(errors))
