"""OpenTelemetry trace sink: exports rlobs ``span`` events as OTel spans.

Probes open spans with ``Recorder.span(...)`` (steps, weight syncs and their boundaries, grader
batches — never per token or sample). The span lands in the run record as a ``span`` event in any
case; when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
variables are set, this sink also converts each span into an SDK ``ReadableSpan`` (same trace and
span ids) and hands it to the SDK's ``BatchSpanProcessor`` with the OTLP/HTTP exporter.

Nothing here can block or break the producer: the batch processor has its own bounded queue and
thread; failed exports and queue overflows are counted as telemetry drops (reason ``otlp_export``
/ ``otlp_queue_full``, sink ``otel``).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Callable, Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from rlobs.events import EventBatch, WriterInfo

log = logging.getLogger("rlobs.otel")

OTLP_ENV = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def otlp_configured(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return any(env.get(k) for k in OTLP_ENV)


class _CountingExporter(SpanExporter):
    def __init__(self, inner: SpanExporter, on_fail: Callable[[int], None]):
        self.inner = inner
        self.on_fail = on_fail
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # an exporter must not raise, but be sure
            log.warning("OTLP export raised %s: %s", type(exc).__name__, exc)
            result = SpanExportResult.FAILURE
        if result == SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            self.on_fail(len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        ff = getattr(self.inner, "force_flush", None)
        return bool(ff(timeout_millis)) if ff else True


def _attr_value(v: Any) -> Any:
    if isinstance(v, (str, bool, int, float)):
        return v
    return json.dumps(v, default=str)


class OtelTraceSink:
    name = "otel"

    def __init__(self, info: WriterInfo, *, exporter: SpanExporter | None = None,
                 on_drop: Callable[[int, str], None] | None = None, max_queue_size: int = 2048,
                 schedule_delay_millis: int = 1000, shutdown_timeout_s: float = 3.0):
        self.info = info
        self._on_drop = on_drop or (lambda n, reason: None)
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        self.exporter = _CountingExporter(exporter, lambda n: self._on_drop(n, "otlp_export"))
        self.processor = BatchSpanProcessor(self.exporter, max_queue_size=max_queue_size,
                                            schedule_delay_millis=schedule_delay_millis)
        self._max_queue = max_queue_size
        self.shutdown_timeout_s = shutdown_timeout_s
        self.resource = Resource.create({
            "service.name": f"rlobs.{info.component}",
            "rlobs.run_id": info.run_id,
            "rlobs.process": info.process,
            "rlobs.rank": info.rank,
        })
        self.handed = 0

    def _queue_full(self) -> bool:
        inner = getattr(self.processor, "_batch_processor", None)
        queue = getattr(inner, "_queue", None)
        try:
            return queue is not None and len(queue) >= self._max_queue
        except TypeError:
            return False

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
        status = Status(StatusCode.ERROR) if row.get("status") == "error" else Status(StatusCode.OK)
        return ReadableSpan(name=row["name"], context=ctx, parent=parent, resource=self.resource,
                            attributes=attributes, kind=SpanKind.INTERNAL, status=status,
                            start_time=row["start_ns"], end_time=row["end_ns"])

    def write(self, batch: EventBatch) -> None:
        for row in batch.rows("span"):
            if self._queue_full():
                self._on_drop(1, "otlp_queue_full")
            self.processor.on_end(self.to_readable(row))
            self.handed += 1

    def flush(self) -> None:
        self.processor.force_flush(timeout_millis=int(self.shutdown_timeout_s * 1000))

    def close(self) -> None:
        self.processor.shutdown()
