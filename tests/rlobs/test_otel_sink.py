"""OpenTelemetry export: spans reach a real OTLP/HTTP endpoint; a dead or hanging one costs the producer nothing."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

import rlobs


class _Receiver:
    """A minimal OTLP/HTTP (protobuf) trace receiver on 127.0.0.1."""

    def __init__(self):
        self.spans: list = []
        self.resources: list = []
        self.scopes: list = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                for rs in req.resource_spans:
                    receiver.resources.append({a.key: a.value for a in rs.resource.attributes})
                    for ss in rs.scope_spans:
                        receiver.scopes.append((ss.scope.name, ss.scope.version))
                        receiver.spans.extend(ss.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def _wait(cond, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def otlp_env(monkeypatch):
    def set_endpoint(port: int):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")

    return set_endpoint


def test_spans_exported_over_otlp_with_the_record_ids(run_dir, otlp_env):
    recv = _Receiver()
    otlp_env(recv.port)
    rec = rlobs.init(run_dir, component="trainer", prometheus=False)
    try:
        rec.set_step(4)
        with rec.span("train_step") as outer:
            with rec.span("weight_sync", version=5):
                pass
        rec.flush()
        assert _wait(lambda: len(recv.spans) == 2)
        by_name = {s.name: s for s in recv.spans}
        assert by_name["train_step"].trace_id.hex() == f"{outer.trace_id:032x}"
        assert by_name["weight_sync"].parent_span_id.hex() == f"{outer.span_id:016x}"
        attrs = {a.key: a.value.int_value for a in by_name["weight_sync"].attributes}
        assert attrs["version"] == 5 and attrs["rlobs.step"] == 4
        assert recv.resources[0]["service.name"].string_value == "rlobs.trainer"
    finally:
        rlobs.shutdown()
        recv.stop()
    with rlobs.open_run(run_dir) as record:  # and the spans are in the run record as well
        assert record.counts()["span"] == 2


def test_otel_conventions_service_name_resource_scope_and_unset_status(run_dir, otlp_env, monkeypatch):
    from opentelemetry.proto.trace.v1.trace_pb2 import Status

    recv = _Receiver()
    otlp_env(recv.port)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "grpo-7b-trainer")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=staging,team=rl")
    rec = rlobs.init(run_dir, component="trainer", rank=3, prometheus=False)
    try:
        with rec.span("train_step"):
            pass
        with pytest.raises(RuntimeError):
            with rec.span("weight_sync"):
                raise RuntimeError("load failed")
        rec.flush()
        assert _wait(lambda: len(recv.spans) == 2)
        res = {k: v.string_value or v.int_value for k, v in recv.resources[0].items()}
        assert res["service.name"] == "grpo-7b-trainer"  # the operator's name wins over rlobs' default
        assert res["deployment.environment"] == "staging" and res["team"] == "rl"
        assert res["service.instance.id"] == rec.info.process and res["rlobs.rank"] == 3
        assert res["rlobs.run_id"] == rec.info.run_id and res["telemetry.sdk.language"] == "python"
        assert recv.scopes[0] == ("rlobs", rlobs.__version__)
        by_name = {s.name: s for s in recv.spans}
        assert by_name["train_step"].status.code == Status.STATUS_CODE_UNSET  # success is left unset
        assert by_name["weight_sync"].status.code == Status.STATUS_CODE_ERROR
    finally:
        rlobs.shutdown()
        recv.stop()


def test_rlobs_spans_nest_under_the_callers_otel_span_and_the_callers_under_rlobs(run_dir):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        InMemorySpanExporter,
    )

    app_spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(app_spans))
    tracer = provider.get_tracer("my-trainer")  # the application's own tracing, not the global provider
    rec = rlobs.init(run_dir, component="trainer", prometheus=False, set_global=False)
    try:
        with tracer.start_as_current_span("epoch") as epoch:
            with rec.span("train_step") as step:
                with tracer.start_as_current_span("forward"):
                    with rec.span("advantage") as inner:
                        pass
        with rec.span("standalone") as alone:
            pass
    finally:
        rec.close()
    ectx = epoch.get_span_context()
    assert step.trace_id == ectx.trace_id  # rlobs' step joined the application's trace
    forward = next(s for s in app_spans.get_finished_spans() if s.name == "forward")
    assert forward.parent.span_id == step.span_id and forward.context.trace_id == step.trace_id
    assert inner.trace_id == ectx.trace_id
    assert alone.trace_id != ectx.trace_id  # outside any span: a trace of its own
    with rlobs.open_run(run_dir) as record:
        parents = dict(record.sql("SELECT name, parent_span_id FROM span").fetchall())
    assert parents["train_step"] == f"{ectx.span_id:016x}"
    assert parents["advantage"] == f"{forward.context.span_id:016x}"
    assert parents["standalone"] is None


def _emit_spans_timed(rec, n: int) -> float:
    worst = 0.0
    for i in range(n):
        t0 = time.perf_counter()
        with rec.span("grader_batch", i=i):
            pass
        worst = max(worst, time.perf_counter() - t0)
    return worst


def test_stopped_endpoint_neither_blocks_nor_raises_and_drops_are_counted(run_dir, otlp_env):
    recv = _Receiver()
    otlp_env(recv.port)
    rec = rlobs.init(run_dir, component="trainer", prometheus=False)
    _emit_spans_timed(rec, 10)
    rec.flush()
    assert _wait(lambda: len(recv.spans) == 10)
    recv.stop()  # the collector goes away mid-run
    worst = _emit_spans_timed(rec, 500)
    rec.flush()
    assert worst < 0.05, f"an emit took {worst * 1e3:.1f} ms"
    t0 = time.perf_counter()
    rlobs.shutdown(timeout=5.0)
    assert time.perf_counter() - t0 < 2.5  # the OTLP sink gets at most 1 s to drain, whatever the collector does
    dropped = {reason: n for (reason, sink), n in rec.stats()["dropped"].items() if sink == "otel"}
    # every span after the collector died is counted: failed exports, or abandoned at shutdown (retrying)
    assert sum(dropped.values()) == 500 and set(dropped) <= {"otlp_export", "otlp_shutdown"}, dropped
    with rlobs.open_run(run_dir) as record:
        assert record.counts()["span"] == 510  # the record kept every span
        # and the loss is in the record too, not only in the process's counters
        assert record.sql("SELECT sum(dropped) FROM telemetry WHERE sink = 'otel'").fetchall()[0][0] == 500


def test_hanging_endpoint_neither_blocks_nor_raises(run_dir, otlp_env):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # accepts connections, never answers
    otlp_env(listener.getsockname()[1])
    rec = rlobs.init(run_dir, component="trainer", prometheus=False)
    try:
        worst = _emit_spans_timed(rec, 300)
        assert worst < 0.05
        rec.flush()
        t0 = time.perf_counter()
        rlobs.shutdown(timeout=3.0)
        assert time.perf_counter() - t0 < 2.5  # bounded by the sink's 1 s budget, not the hanging request
    finally:
        listener.close()
    dropped = {reason: n for (reason, sink), n in rec.stats()["dropped"].items() if sink == "otel"}
    assert sum(dropped.values()) == 300, dropped  # nothing reached the collector and every span is counted
    with rlobs.open_run(run_dir) as record:
        assert record.counts()["span"] == 300
