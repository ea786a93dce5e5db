"""OpenTelemetry trace sink: exports rlobs ``span`` events as OTel spans.

Probes open spans with ``Recorder.span(...)`` (steps, weight syncs and their boundaries, grader
batches — never per token or sample). The span lands in the run record as a ``span`` event in any
case; when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
variables are set, this sink also converts each span into an SDK ``ReadableSpan`` (same trace and
span ids) and exports it with the OTLP/HTTP exporter.

Conventions: the resource honours ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (they win over
rlobs' defaults: ``service.name`` ``rlobs.<component>``), carries ``service.instance.id`` (the process
name, unique per process) and the run, process and rank; spans come from the instrumentation scope
``rlobs`` with the package version; successful spans keep the status UNSET (only failures set ERROR).

Nothing here can block or break the producer, and nothing is lost without being counted: spans wait in
a bounded queue (the oldest is evicted when it is full: ``otlp_queue_full``) for one export thread;
failed exports count as ``otlp_export``; at close the queue gets at most ``shutdown_timeout_s`` (1 s)
to drain, and every span not exported by then (still queued, or in an export that hangs) counts as
``otlp_shutdown``. All are telemetry drops of sink ``otel``.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
import time
from typing import Any, Callable, Sequence

from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from rlobs.events import EventBatch, WriterInfo

log = logging.getLogger("rlobs.otel")

OTLP_ENV = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
SCOPE_NAME = "rlobs"


def otlp_configured(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return any(env.get(k) for k in OTLP_ENV)


def _version() -> str:
    from rlobs import __version__

    return __version__


def resource_for(info: WriterInfo) -> Resource:
    """The OTel resource of one rlobs process: rlobs' defaults, overridden by ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES`` (the operator's word wins), plus the SDK's telemetry.sdk.* attributes."""
    defaults = Resource({"service.name": f"rlobs.{info.component}", "service.instance.id": info.process,
                         "service.version": _version(), "rlobs.run_id": info.run_id, "rlobs.process": info.process,
                         "rlobs.component": info.component, "rlobs.rank": info.rank})
    return Resource.create({}).merge(defaults).merge(OTELResourceDetector().detect())


def _attr_value(v: Any) -> Any:
    if isinstance(v, (str, bool, int, float)):
        return v
    return json.dumps(v, default=str)


class _ExportQueue:
    """A bounded queue and one export thread, with every span accounted for: exported, failed, evicted
    (queue full) or abandoned at shutdown. The SDK's BatchSpanProcessor drops silently on eviction and
    waits up to 30 s at shutdown; this one counts each case and stops within its budget."""

    def __init__(self, exporter: SpanExporter, on_drop: Callable[[int, str], None], *, max_queue_size: int,
                 max_batch: int = 512, schedule_delay_s: float = 1.0):
        self.exporter = exporter
        self.on_drop = on_drop
        self.queue: collections.deque[ReadableSpan] = collections.deque()
        self.max_queue_size = max_queue_size
        self.max_batch = max_batch
        self.schedule_delay_s = schedule_delay_s
        self.handed = self.exported = self.failed = self.evicted = 0
        self.closed = False
        self.abandoned_counted = False  # set once shutdown has counted the unexported spans as lost
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="rlobs-otlp-export", daemon=True)
        self.thread.start()

    def put(self, span: ReadableSpan) -> None:
        with self._lock:
            if self.closed:
                self.on_drop(1, "otlp_shutdown")
                return
            if len(self.queue) >= self.max_queue_size:
                self.queue.popleft()
                self.evicted += 1
                self.on_drop(1, "otlp_queue_full")
            self.queue.append(span)
            self.handed += 1
            if len(self.queue) >= self.max_batch:
                self._wake.set()

    def _take(self) -> list[ReadableSpan]:
        with self._lock:
            n = min(self.max_batch, len(self.queue))
            return [self.queue.popleft() for _ in range(n)]

    def _run(self) -> None:
        while True:
            self._wake.wait(self.schedule_delay_s)
            self._wake.clear()
            while True:
                batch = self._take()
                if not batch:
                    break
                self._export(batch)
            if self.closed:
                return

    def _export(self, batch: Sequence[ReadableSpan]) -> None:
        try:
            result = self.exporter.export(batch)
        except Exception as exc:  # an exporter must not raise, but be sure
            log.warning("OTLP export raised %s: %s", type(exc).__name__, exc)
            result = SpanExportResult.FAILURE
        with self._lock:
            if self.closed and self.abandoned_counted:
                return  # a hung export came back after close counted its spans as lost
            if result == SpanExportResult.SUCCESS:
                self.exported += len(batch)
            else:
                self.failed += len(batch)
                self.on_drop(len(batch), "otlp_export")

    def shutdown(self, timeout_s: float) -> int:
        """Drain for at most ``timeout_s``; count what was not exported by then. Returns that count."""
        self.closed = True
        self._wake.set()
        self.thread.join(max(timeout_s, 0.0))
        with self._lock:
            lost = self.handed - self.exported - self.failed - self.evicted
            self.queue.clear()
            self.abandoned_counted = True
            if lost > 0:
                self.on_drop(lost, "otlp_shutdown")
        threading.Thread(target=self._shutdown_exporter, name="rlobs-otlp-shutdown", daemon=True).start()
        return max(lost, 0)

    def _shutdown_exporter(self) -> None:
        try:
            self.exporter.shutdown()
        except Exception as exc:
            log.debug("OTLP exporter shutdown failed: %s", exc)


class OtelTraceSink:
    name = "otel"

    def __init__(self, info: WriterInfo, *, exporter: SpanExporter | None = None,
                 on_drop: Callable[[int, str], None] | None = None, max_queue_size: int = 2048,
                 schedule_delay_millis: int = 1000, shutdown_timeout_s: float = 1.0):
        self.info = info
        self._on_drop = on_drop or (lambda n, reason: None)
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )

            exporter = OTLPSpanExporter()
        self.shutdown_timeout_s = shutdown_timeout_s
        self.resource = resource_for(info)
        self.scope = InstrumentationScope(SCOPE_NAME, _version())
        self.queue = _ExportQueue(exporter, self._on_drop, max_queue_size=max_queue_size,
                                  schedule_delay_s=schedule_delay_millis / 1000)
        self._settled = False

    @property
    def handed(self) -> int:
        return self.queue.handed

    def to_readable(self, row: dict[str, Any]) -> ReadableSpan:
        flags = TraceFlags(TraceFlags.SAMPLED)
        trace_id = int(row["trace_id"], 16)
        ctx = SpanContext(trace_id=trace_id, span_id=int(row["span_id"], 16), is_remote=False, trace_flags=flags)
        parent = None
        if row.get("parent_span_id"):
            parent = SpanContext(trace_id=trace_id, span_id=int(row["parent_span_id"], 16), is_remote=False,
                                 trace_flags=flags)
        try:
            attrs = json.loads(row.get("attributes") or "{}")
        except json.JSONDecodeError:
            attrs = {}
        attributes = {k: _attr_value(v) for k, v in attrs.items() if v is not None}
        if row.get("step") is not None:
            attributes.setdefault("rlobs.step", row["step"])
        if row.get("policy_version") is not None:
            attributes.setdefault("rlobs.policy_version", row["policy_version"])
        # OTel: instrumentation leaves a successful span UNSET (OK is the application's to set); errors are ERROR
        status = Status(StatusCode.ERROR) if row.get("status") == "error" else Status(StatusCode.UNSET)
        return ReadableSpan(name=row["name"], context=ctx, parent=parent, resource=self.resource,
                            attributes=attributes, kind=SpanKind.INTERNAL, status=status,
                            start_time=row["start_ns"], end_time=row["end_ns"], instrumentation_scope=self.scope)

    def write(self, batch: EventBatch) -> None:
        for row in batch.rows("span"):
            self.queue.put(self.to_readable(row))

    def settle(self, timeout_s: float) -> None:
        """Export what is queued within ``min(timeout_s, shutdown_timeout_s)`` and count the rest as lost.
        The recorder calls this before its final drop report, so the loss is in the run record too."""
        if self._settled:
            return
        self._settled = True
        t0 = time.monotonic()
        lost = self.queue.shutdown(min(timeout_s, self.shutdown_timeout_s))
        if lost:
            log.warning("rlobs: %d span(s) not exported over OTLP within %.1f s of shutdown (counted as dropped)",
                        lost, time.monotonic() - t0)

    def flush(self) -> None:
        pass  # the export thread runs on its own schedule; a flush must not wait on a collector

    def close(self) -> None:
        self.settle(self.shutdown_timeout_s)
