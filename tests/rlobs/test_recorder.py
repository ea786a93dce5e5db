from __future__ import annotations

import threading
import time

import pytest

import rlobs
from rlobs.events import WriterInfo
from rlobs.recorder import NoopRecorder, Recorder, parse_traceparent
from rlobs.sinks.memory import MemorySink


def test_get_recorder_is_a_noop_before_init():
    rlobs.shutdown()
    rec = rlobs.get_recorder()
    assert isinstance(rec, NoopRecorder)
    rec.emit("train_step", loss=1.0)  # does nothing, raises nothing
    with rec.span("x") as sp:
        sp.set("a", 1)
    assert rec.counter("rlobs_train_steps_total").inc() is None


def test_events_reach_the_record_with_envelope_and_context(recorder, run_dir):
    recorder.set_step(7)
    recorder.set_policy_version(3)
    recorder.emit("train_step", loss=0.5, grad_norm=2.0, samples=16)
    recorder.emit("train_step", loss=0.25, step=8, policy_version=4)
    assert recorder.flush()
    rlobs.shutdown()
    with rlobs.open_run(run_dir) as rec:
        rows = rec.sql("SELECT step, policy_version, loss, grad_norm, samples, component, rank, run_id "
                       "FROM train_step ORDER BY mono_ns").fetchall()
        assert rows == [
            (7, 3, 0.5, 2.0, 16, "trainer", 0, rec.run_id),
            (8, 4, 0.25, None, None, "trainer", 0, rec.run_id),
        ]
        assert rec.counts()["manifest"] == 1


def test_spans_nest_and_stamp_inner_events(recorder):
    with recorder.span("step", step=1) as outer:
        recorder.emit("heartbeat", phase="train")
        with recorder.span("weight_sync", version=2) as inner:
            inner.set("bytes", 123)
    recorder.flush()
    mem = recorder.sink("memory")
    spans = {s["name"]: s for s in mem.of_kind("span")}
    assert spans["weight_sync"]["parent_span_id"] == f"{outer.span_id:016x}"
    assert spans["weight_sync"]["trace_id"] == spans["step"]["trace_id"] == f"{outer.trace_id:032x}"
    assert spans["step"]["parent_span_id"] is None
    assert '"bytes": 123' in spans["weight_sync"]["attributes"]
    hb = mem.of_kind("heartbeat")[0]
    assert hb["span_id"] == f"{outer.span_id:016x}"
    assert spans["step"]["end_ns"] >= spans["weight_sync"]["end_ns"] >= spans["weight_sync"]["start_ns"]


def test_span_records_error_status_and_reraises(recorder):
    with pytest.raises(KeyError):
        with recorder.span("step"):
            raise KeyError("boom")
    recorder.flush()
    assert recorder.sink("memory").of_kind("span")[0]["status"] == "error"


def test_traceparent_roundtrip_across_processes(recorder):
    with recorder.span("sync") as sp:
        tp = sp.traceparent
    assert parse_traceparent(tp) == (sp.trace_id, sp.span_id)
    assert parse_traceparent("garbage") is None
    with recorder.span("load", parent=tp) as child:
        pass
    assert child.trace_id == sp.trace_id


def test_invalid_events_are_dropped_counted_and_the_rest_kept(recorder):
    recorder.emit("no_such_kind", x=1)
    recorder.emit("train_step", bogus_field=1)
    recorder.emit("train_step", loss="not a number")
    recorder.emit("train_step", loss=1.5)
    recorder.flush()
    stats = recorder.stats()
    assert stats["dropped"] == {("unknown_kind", "recorder"): 1, ("invalid_event", "recorder"): 2}
    assert [e["loss"] for e in recorder.sink("memory").of_kind("train_step")] == [1.5]


def _recorder(sinks, **kw) -> Recorder:
    return Recorder(WriterInfo("run", "p", "trainer", 0), sinks, **kw)


def test_full_queue_drops_and_counts_without_blocking():
    mem = MemorySink()
    rec = _recorder([mem], max_queue=10, flush_interval=3600)
    for i in range(25):
        rec.emit("heartbeat", phase="x", detail=str(i))
    assert rec.stats()["dropped"][("queue_full", "recorder")] == 15
    rec.flush()
    assert len(mem.of_kind("heartbeat")) == 10
    rec.close()
    # the drop was reported into the record stream as a telemetry event
    tel = mem.of_kind("telemetry")
    assert [(t["reason"], t["dropped"]) for t in tel] == [("queue_full", 15)]


class _RaisingSink:
    name = "raising"

    def __init__(self):
        self.calls = 0

    def write(self, batch):
        self.calls += 1
        raise OSError("disk on fire")

    def flush(self):
        raise OSError("still on fire")

    def close(self):
        raise OSError("fire")


def test_a_raising_sink_is_counted_and_never_reaches_the_producer():
    mem, bad = MemorySink(), _RaisingSink()
    rec = _recorder([bad, mem], flush_interval=3600)
    for i in range(5):
        rec.emit("heartbeat", phase="train")
    rec.flush()
    rec.emit("heartbeat", phase="train")
    rec.close()
    assert bad.calls == 3  # two heartbeat batches, then the final telemetry report
    assert rec.stats()["dropped"][("sink_error", "raising")] == 6 + 1  # 5 + 1 heartbeats + 1 telemetry report
    assert [(t["reason"], t["sink"], t["dropped"]) for t in mem.of_kind("telemetry")] == [("sink_error", "raising", 6)]
    assert len(mem.of_kind("heartbeat")) == 6  # the healthy sink got everything


class _BlockingSink:
    name = "blocking"

    def __init__(self):
        self.release = threading.Event()

    def write(self, batch):
        self.release.wait(30)

    def flush(self):
        pass

    def close(self):
        pass


def test_a_hanging_sink_blocks_neither_emit_nor_close_nor_other_sinks():
    mem, hang = MemorySink(), _BlockingSink()
    rec = _recorder([mem, hang], flush_interval=3600, sink_backlog=2)
    t0 = time.perf_counter()
    for round_ in range(6):
        for i in range(1000):
            rec.emit("heartbeat", phase="train")
        seq = rec._drain()
        assert rec._workers[0].wait_done(seq, time.monotonic() + 10)  # the healthy sink keeps up
    emit_s = time.perf_counter() - t0
    assert emit_s < 5.0
    assert rec.flush(timeout=0.5) is False  # the hanging sink cannot catch up
    assert len(mem.of_kind("heartbeat")) == 6000  # the healthy one did
    t0 = time.perf_counter()
    rec.close(timeout=1.0)
    assert time.perf_counter() - t0 < 3.0
    dropped = rec.stats()["dropped"]
    # first batch is stuck in write, two wait in the backlog, the other three were refused, and so was
    # the final telemetry report (one event) sent at close; the two waiting are lost at close
    assert dropped[("sink_backlog", "blocking")] == 3001
    assert dropped[("sink_timeout", "blocking")] == 2000
    hang.release.set()


def test_emit_from_many_threads_loses_nothing(recorder):
    def work(t):
        for i in range(2000):
            recorder.emit("ledger", sample_id=f"{t}-{i}", state="generated")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    recorder.flush()
    ids = [e["sample_id"] for e in recorder.sink("memory").of_kind("ledger")]
    assert len(ids) == len(set(ids)) == 8000


def test_close_is_idempotent_and_marks_process_ended(run_dir):
    rec = rlobs.init(run_dir, component="generator", rank=1, prometheus=False)
    rec.emit("heartbeat", phase="generate")
    rlobs.shutdown()
    rec.close()
    with rlobs.open_run(run_dir) as record:
        (proc,) = record.processes
        assert proc.component == "generator" and proc.rank == 1 and proc.status == "ended"
        assert record.counts() == {"heartbeat": 1, "manifest": 1}


def test_fast_emitter_rows_are_exact_and_interleave_with_dict_events(recorder, run_dir):
    ledger = recorder.emitter("ledger", ("sample_id", "state", "tokens"))
    recorder.set_step(2)
    ledger("a", "generated", 10)
    recorder.emit("ledger", sample_id="b", state="dropped", reason="stale")
    with recorder.span("s") as sp:
        ledger("c", "consumed", 30, step=5, policy_version=4)
    ledger("too", "few")  # wrong arity: dropped and counted, not raised
    ledger("d", "graded", "not an int")  # wrong type: isolated and dropped, the rest kept
    recorder.flush()
    assert recorder.stats()["dropped"] == {("invalid_event", "recorder"): 2}
    rows = sorted((r["sample_id"], r["state"], r["tokens"], r["step"], r["policy_version"], r["span_id"], r["reason"])
                  for r in (dict(reason=None, tokens=None) | e for e in recorder.sink("memory").of_kind("ledger")))
    assert rows == [("a", "generated", 10, 2, None, None, None), ("b", "dropped", None, 2, None, None, "stale"),
                    ("c", "consumed", 30, 5, 4, f"{sp.span_id:016x}", None)]
    rlobs.shutdown()
    with rlobs.open_run(run_dir) as rec:
        assert rec.sql("SELECT sample_id, tokens, step FROM ledger ORDER BY sample_id").fetchall() == [
            ("a", 10, 2), ("b", None, 2), ("c", 30, 5)]


def test_fast_emitter_definition_mistakes_raise_at_definition(recorder):
    with pytest.raises(ValueError, match="unknown event kind"):
        recorder.emitter("nope", ("a",))
    with pytest.raises(ValueError, match="unknown or repeated"):
        recorder.emitter("ledger", ("sample_id", "bogus"))
    with pytest.raises(ValueError, match="unknown or repeated"):
        recorder.emitter("ledger", ("sample_id", "sample_id"))


def test_fast_emitter_from_many_threads_never_tears_rows(recorder):
    emit = recorder.emitter("ledger", ("sample_id", "group_id", "tokens"))

    def work(t):
        for i in range(5000):
            emit(f"{t}-{i}", f"g{t}", i)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for _ in range(20):  # drain concurrently with the producers
        recorder._drain()
    for th in threads:
        th.join()
    recorder.flush()
    rows = recorder.sink("memory").of_kind("ledger")
    assert len(rows) == 20000
    assert all(r["group_id"] == "g" + r["sample_id"].split("-")[0] and r["tokens"] == int(r["sample_id"].split("-")[1])
               for r in rows)
    assert recorder.stats()["dropped"] == {}
