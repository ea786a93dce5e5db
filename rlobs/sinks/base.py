"""The Sink interface: where the recorder sends batches of events.

A sink runs in its own worker thread (see ``rlobs.recorder``), so a slow sink delays only itself.
Anything a sink raises is caught, counted in ``rlobs_telemetry_dropped_total{reason="sink_error"}``
and logged; it never reaches the code that emitted the events.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from rlobs.events import EventBatch


@runtime_checkable
class Sink(Protocol):
    name: str

    def write(self, batch: EventBatch) -> None:
        """Consume one batch. May raise; the recorder counts the batch as dropped for this sink."""

    def flush(self) -> None:
        """Make everything written so far durable / visible."""

    def close(self) -> None:
        """Release resources. Called once, after the last write."""
