"""Weight-sync probe: five boundaries, fingerprints, torn reads, skipped cache resets, spans."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import torch

from probes.weight_sync import (StagingBuffer, WeightSyncProbe, compare_fingerprints, fingerprints,
                                tensor_fingerprint)
from tests.probes.conftest import rows


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"embed.weight": torch.randn(16, 8, generator=g), "layer.weight": torch.randn(8, 8, generator=g),
            "norm.weight": torch.ones(8, dtype=torch.bfloat16)}


def test_fingerprints_are_content_dtype_and_shape_sensitive_across_torch_and_numpy():
    a = torch.arange(12, dtype=torch.float32)
    assert tensor_fingerprint(a) == tensor_fingerprint(np.arange(12, dtype=np.float32))
    assert tensor_fingerprint(a) != tensor_fingerprint(a.reshape(3, 4))
    assert tensor_fingerprint(a) != tensor_fingerprint(a.double())
    b = a.clone()
    b[5] += 1e-6
    assert tensor_fingerprint(a) != tensor_fingerprint(b)
    assert tensor_fingerprint(a.to(torch.bfloat16)) == tensor_fingerprint(a.to(torch.bfloat16).clone())
    assert tensor_fingerprint(a[::2]) == tensor_fingerprint(a[::2].contiguous())
    assert compare_fingerprints({"x": "1", "y": "2", "z": "3"}, {"x": "1", "y": "9"}) == (["y"], ["z"])


def test_device_kind_fingerprints_every_byte_and_its_place_and_is_the_same_in_parts():
    """The ``device`` kind (the GPU weight-sync paths': a checksum computed with torch where the tensor lives) sees
    a one-ulp change anywhere, two words swapped, the dtype and the shape; hashing a fused tensor part by part, in
    chunks or from an unaligned view gives the same fingerprint as the whole; it is never equal to ``bytes``."""
    import probes.fingerprint as fp

    g = torch.Generator().manual_seed(0)
    a = torch.randn(300, 64, generator=g).to(torch.bfloat16)
    f = tensor_fingerprint(a, kind="device")
    assert f == tensor_fingerprint(a.clone(), kind="device") != tensor_fingerprint(a)
    for i in (0, 9_000, a.numel() - 1):  # first, middle, last element: one ulp up
        b = a.clone().reshape(-1)
        b.view(torch.int16)[i] += 1  # the next bfloat16
        assert not torch.equal(b, a.reshape(-1))
        assert tensor_fingerprint(b.reshape(a.shape), kind="device") != f, i
    c = a.clone()
    c[[3, 4]] = c[[4, 3]]  # the same bytes in other places
    assert tensor_fingerprint(c, kind="device") != f
    assert tensor_fingerprint(a.reshape(64, 300), kind="device") != f
    assert tensor_fingerprint(a.view(torch.float16), kind="device") != f
    assert fp.device_fingerprint([a[:100], a[100:101], a[101:]]) == f  # a fused tensor, part by part
    odd = torch.arange(11, dtype=torch.uint8)  # parts that end inside a 32-bit word
    assert fp.device_fingerprint([odd[:3], odd[3:5], odd[5:]]) == tensor_fingerprint(odd, kind="device")
    flat = a.reshape(-1)
    assert tensor_fingerprint(flat[1:5001], kind="device") == tensor_fingerprint(flat[1:5001].clone(), kind="device")
    big = torch.randn(fp.PERIOD + 1001, generator=g)  # over one block of words; parts that straddle its end
    whole = tensor_fingerprint(big, kind="device")
    assert fp.device_fingerprint([big[:1001], big[1001:fp.PERIOD + 3], big[fp.PERIOD + 3:]]) == whole
    moved = big.clone()
    moved[[5, fp.PERIOD + 5]] = moved[[fp.PERIOD + 5, 5]]  # the same offset in two blocks, swapped
    assert tensor_fingerprint(moved, kind="device") != whole
    assert fp.device_checksum([torch.zeros(0)]) == 0
    with pytest.raises(ValueError, match="bytes, device"):
        tensor_fingerprint(a, kind="sha")


def test_healthy_sync_five_boundaries_spans_and_metrics(live):
    state = _state()
    nbytes = 16 * 8 * 4 + 8 * 8 * 4 + 8 * 2
    probe = WeightSyncProbe()
    buf = StagingBuffer()
    t_step = time.time_ns() - 2_000_000_000  # the optimiser step finished 2 s ago
    with probe.sync(3, optimizer_step_ns=t_step) as s:
        with s.dump() as b:
            b.record_state(state)
        buf.write(state, version=3)
        staged = s.read_staging(buf)
        with s.transfer() as b:
            time.sleep(0.01)
            b.bytes = nbytes
        with s.load() as b:
            loaded = {k: torch.from_numpy(v.copy()) if v.dtype != np.int16 else
                      torch.from_numpy(v.copy()).view(torch.bfloat16) for k, v in staged.items()}
            b.record_state(loaded)
        with s.cache_reset() as b:
            b.requested()
            b.confirmed(True)
            b.inflight(aborted=2, resumed=1)
    res = s.results
    assert {k: v["outcome"] for k, v in res.items()} == {b: "ok" for b in
                                                          ("dump", "staging", "transfer", "load", "cache_reset")}
    assert res["dump"]["bytes"] == nbytes and res["dump"]["tensors_expected"] == 3
    assert res["load"]["fingerprint_match"] is True and res["load"]["fingerprint"] == res["dump"]["fingerprint"]
    assert res["staging"]["torn"] is False and res["staging"]["seq_before"] == res["staging"]["seq_after"] == 2
    assert 0 < res["transfer"]["bandwidth_bps"] <= nbytes / 0.01
    assert res["load"]["mem_hwm_bytes"] > 1 << 20

    for boundary in ("dump", "staging", "transfer", "load", "cache_reset", "end_to_end"):
        outcome = "ok"
        assert live.value("rlobs_weight_sync_boundaries_total", boundary=boundary, outcome=outcome) == 1.0
    assert live.value("rlobs_weight_sync_bytes_total", boundary="transfer") == nbytes
    assert live.value("rlobs_weight_sync_bandwidth_bytes_per_second") == pytest.approx(res["transfer"]["bandwidth_bps"])
    assert live.value("rlobs_weight_sync_memory_high_water_bytes") == res["load"]["mem_hwm_bytes"]
    assert live.value("rlobs_weight_sync_version") == 3.0
    assert live.value("rlobs_weight_sync_policy_lag_seconds_count") == 1.0
    assert live.value("rlobs_weight_sync_policy_lag_seconds_sum") >= 2.0
    assert live.value("rlobs_weight_sync_lock_wait_seconds_count") == 1.0
    assert [v for _, v in live.scrape().get("rlobs_weight_sync_fingerprint_mismatches_total", [])] in ([], [0.0])
    assert [v for _, v in live.scrape().get("rlobs_weight_sync_torn_reads_total", [])] in ([], [0.0])

    rec = live.close_and_open()
    spans = {n: (sid, parent) for n, sid, parent in rows(rec, "select name, span_id, parent_span_id from span")}
    root_id, root_parent = spans.pop("weight_sync")
    assert root_parent is None
    assert sorted(spans) == ["weight_sync.cache_reset", "weight_sync.dump", "weight_sync.load",
                             "weight_sync.staging", "weight_sync.transfer"]
    assert {p for _, p in spans.values()} == {root_id}
    by_boundary = dict(rows(rec, "select boundary, span_id from weight_sync"))
    assert by_boundary["end_to_end"] == root_id
    assert all(by_boundary[b] == spans[f"weight_sync.{b}"][0] for b in res)
    (inflight,) = rows(rec, "select inflight_aborted, inflight_resumed from weight_sync where boundary='cache_reset'")
    assert inflight == (2, 1)


def test_fingerprint_mismatch_lists_the_tensor(live):
    state = _state()
    probe = WeightSyncProbe()
    with probe.sync(4) as s:
        with s.dump() as b:
            b.record_state(state)
        with s.load() as b:
            loaded = dict(state)
            loaded["layer.weight"] = state["layer.weight"].to(torch.bfloat16).float()  # lossy load path
            b.record_state(loaded)
        with s.cache_reset() as b:
            b.requested()
            b.confirmed()
    load = s.results["load"]
    assert (load["outcome"], load["fingerprint_match"]) == ("mismatch", False)
    assert json.loads(load["mismatched_tensors"]) == ["layer.weight"]
    assert json.loads(load["missing_tensors"]) == []
    assert live.value("rlobs_weight_sync_fingerprint_mismatches_total") == 1.0
    assert live.value("rlobs_weight_sync_boundaries_total", boundary="load", outcome="mismatch") == 1.0
    assert live.value("rlobs_weight_sync_boundaries_total", boundary="end_to_end", outcome="mismatch") == 1.0
    live.assert_no_drops()


def test_missing_tensor_in_dump_and_at_load(live):
    state = _state()
    probe = WeightSyncProbe()
    expected = [*state, "lm_head.weight"]
    with probe.sync(5, expected=expected) as s:
        with s.dump() as b:
            b.record_state(state)
        with s.load() as b:
            partial = {k: v for k, v in state.items() if k != "embed.weight"}
            b.record_state(partial)
        with s.cache_reset() as b:
            b.requested()
            b.confirmed()
    dump, load = s.results["dump"], s.results["load"]
    assert (dump["outcome"], dump["tensors_expected"], dump["tensors_present"]) == ("mismatch", 4, 3)
    assert json.loads(dump["missing_tensors"]) == ["lm_head.weight"]
    assert (load["outcome"], load["tensors_present"], load["fingerprint_match"]) == ("mismatch", 2, False)
    assert json.loads(load["missing_tensors"]) == ["embed.weight", "lm_head.weight"]
    assert json.loads(load["mismatched_tensors"]) == []
    assert live.value("rlobs_weight_sync_boundaries_total", boundary="dump", outcome="mismatch") == 1.0


def test_cache_reset_skipped_or_unconfirmed(live):
    probe = WeightSyncProbe(required=("cache_reset",))
    with probe.sync(6):
        pass  # the trainer forgot the cache reset entirely
    with probe.sync(7) as s:
        with s.cache_reset() as b:
            b.requested()
            b.confirmed(False)  # the engine did not confirm
    assert probe.last.results["cache_reset"]["outcome"] == "skipped"
    assert live.value("rlobs_weight_sync_cache_reset_unconfirmed_total") == 2.0
    assert live.value("rlobs_weight_sync_boundaries_total", boundary="cache_reset", outcome="skipped") == 2.0
    assert live.value("rlobs_weight_sync_boundaries_total", boundary="end_to_end", outcome="skipped") == 2.0
    rec = live.close_and_open()
    assert rows(rec, "select version, reset_requested, reset_confirmed, outcome from weight_sync "
                     "where boundary='cache_reset' order by version") == [(6, False, False, "skipped"),
                                                                          (7, True, False, "skipped")]


def _big_state(n: int = 8) -> dict[str, np.ndarray]:
    return {f"t{i}": np.full(4096, float(i), dtype=np.float32) for i in range(n)}


def _reads_while_writing(use_lock_writer: bool, reads: int = 40) -> list[bool]:
    buf = StagingBuffer()
    buf.write(_big_state())
    stop = threading.Event()

    def writer() -> None:
        v = 0
        while not stop.is_set():
            v += 1
            buf.write({k: a + v for k, a in _big_state().items()}, version=v, use_lock=use_lock_writer,
                      per_tensor=lambda _n: time.sleep(0.0002))

    th = threading.Thread(target=writer, daemon=True)
    th.start()
    try:
        out = []
        for _ in range(reads):
            out.append(buf.read(per_tensor=lambda _n: time.sleep(0.0002)).torn)
        return out
    finally:
        stop.set()
        th.join(5)


def test_torn_read_detected_with_a_real_concurrent_writer(live):
    torn = _reads_while_writing(use_lock_writer=False)  # a writer that bypasses the lock
    assert any(torn)
    assert not any(_reads_while_writing(use_lock_writer=True))  # the same writer under the lock: never torn

    buf = StagingBuffer()
    buf.write(_big_state())
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            buf.write(_big_state(), use_lock=False, per_tensor=lambda _n: time.sleep(0.0005))

    th = threading.Thread(target=writer, daemon=True)
    th.start()
    probe = WeightSyncProbe(required=())
    try:
        for v in range(200):
            with probe.sync(v) as s:
                with s.staging() as b:
                    b.record_read(buf.read(per_tensor=lambda _n: time.sleep(0.0002)))
            if s.results["staging"]["torn"]:
                break
    finally:
        stop.set()
        th.join(5)
    st = s.results["staging"]
    assert st["outcome"] == "torn"
    assert st["seq_before"] != st["seq_after"] or st["seq_before"] % 2 == 1
    assert live.value("rlobs_weight_sync_torn_reads_total") == 1.0
    assert live.value("rlobs_weight_sync_boundaries_total", boundary="staging", outcome="torn") == 1.0


def test_lock_wait_is_measured_when_a_writer_holds_the_lock():
    buf = StagingBuffer()
    buf.write(_big_state(2))
    held = threading.Event()

    def slow_writer() -> None:
        with buf.lock:
            held.set()
            time.sleep(0.3)

    th = threading.Thread(target=slow_writer)
    th.start()
    held.wait(5)
    r = buf.read()
    th.join()
    assert r.lock_wait_s >= 0.05 and not r.torn


def test_error_in_a_boundary_propagates_and_is_recorded(live):
    probe = WeightSyncProbe(required=())
    with pytest.raises(ConnectionError):
        with probe.sync(9) as s:
            with s.transfer() as b:
                b.retries = 3
                raise ConnectionError("peer reset")
    t = probe.last.results["transfer"]
    assert (t["outcome"], t["retries"], t["error"]) == ("error", 3, "ConnectionError: peer reset")
    assert live.value("rlobs_weight_sync_boundaries_total", boundary="end_to_end", outcome="error") == 1.0
    live.assert_no_drops()


def test_fingerprint_a_subset_only_compares_that_subset():
    state = _state()
    probe = WeightSyncProbe(required=())
    with probe.sync(1) as s:
        with s.dump() as b:
            b.record_state(state)
        with s.load() as b:
            b.record_state(state, names=["norm.weight"])
    assert s.results["load"]["outcome"] == "ok" and s.results["load"]["fingerprint_match"] is True
    assert fingerprints(state, ["norm.weight", "absent"]).keys() == {"norm.weight"}


def test_probe_with_the_device_kind_verifies_a_load_and_catches_a_corrupted_one():
    """What another trainer on GPUs configures: ``fingerprint_kind="device"`` on the probe; a faithful load matches,
    one changed tensor is named; an unknown kind is refused at construction."""
    state = _state()
    probe = WeightSyncProbe(required=(), fingerprint_kind="device")
    with probe.sync(1) as s:
        with s.dump() as b:
            dumped = b.record_state(state)
        with s.load() as b:
            b.record_state({k: v.clone() for k, v in state.items()})
    assert s.results["load"]["fingerprint_match"] is True
    assert dumped == fingerprints(state, kind="device") != fingerprints(state)
    bad = {k: v.clone() for k, v in state.items()}
    bad["layer.weight"][3, 3] += 1e-3
    with probe.sync(2) as s:
        with s.dump() as b:
            b.record_state(state)
        with s.load() as b:
            b.record_state(bad)
    assert s.results["load"]["outcome"] == "mismatch" and s.results["load"]["fingerprint_match"] is False
    with pytest.raises(ValueError, match="fingerprint_kind 'gpu'"):
        WeightSyncProbe(fingerprint_kind="gpu")


def test_cross_process_handoff_verifies_the_load_and_joins_the_trace(live):
    state = _state()
    trainer = WeightSyncProbe(required=("dump",))
    generator = WeightSyncProbe(required=("load", "cache_reset"))
    t_step = time.time_ns() - 1_000_000_000
    with trainer.sync(8, optimizer_step_ns=t_step, end_to_end=False) as ts:
        with ts.dump() as b:
            b.record_state(state)
        with ts.transfer() as b:
            b.bytes = 1234
        wire = json.dumps(ts.handoff())  # travels with the weights (Ray object, HTTP header, ...)
    received = json.loads(wire)
    assert received["version"] == 8 and received["optimizer_step_ns"] == t_step
    with generator.sync(handoff=received) as gs:
        with gs.load() as b:
            corrupted = dict(state)
            corrupted["embed.weight"] = state["embed.weight"] * 1.0001
            b.record_state(corrupted)
        with gs.cache_reset() as b:
            b.requested()
            b.confirmed(True)
    assert gs.version == 8
    load = gs.results["load"]
    assert (load["outcome"], json.loads(load["mismatched_tensors"])) == ("mismatch", ["embed.weight"])
    rec = live.close_and_open()
    got = rows(rec, "select boundary, outcome from weight_sync where version = 8 order by mono_ns")
    assert got == [("dump", "ok"), ("transfer", "ok"), ("load", "mismatch"), ("cache_reset", "ok"),
                   ("end_to_end", "mismatch")]  # one end-to-end lag, from the generator side
    (lag,) = rows(rec, "select duration_s from weight_sync where boundary = 'end_to_end'")[0]
    assert lag >= 1.0
    roots = rows(rec, "select trace_id, span_id, parent_span_id from span where name = 'weight_sync' order by start_ns")
    assert len(roots) == 2
    (t_trace, t_span, t_parent), (g_trace, _g_span, g_parent) = roots
    assert t_parent is None and g_trace == t_trace and g_parent == t_span


def test_sampled_fingerprints_trade_coverage_for_speed(live):
    big = torch.randn(1024, 1024)  # 4 MiB: sampled as 16 blocks of 4 KiB
    cap = 64 << 10
    fp = tensor_fingerprint(big, cap)
    assert fp == tensor_fingerprint(big.numpy(), cap) != tensor_fingerprint(big)
    assert tensor_fingerprint(big * 1.0001, cap) != fp  # a rescaled / stale tensor changes every block
    assert tensor_fingerprint(big.to(torch.bfloat16), cap) != tensor_fingerprint(big.to(torch.float16), cap)
    head = big.clone()
    head[0, 0] += 1.0  # the first block is always sampled
    assert tensor_fingerprint(head, cap) != fp
    middle = big.clone()
    middle[500, 500] += 1.0  # between sampled blocks: the documented blind spot
    assert tensor_fingerprint(middle, cap) == fp
    small = torch.ones(100)
    assert tensor_fingerprint(small, cap) == tensor_fingerprint(small)  # small tensors are hashed in full

    probe = WeightSyncProbe(required=(), fingerprint_max_bytes=cap)
    with probe.sync(1) as s:
        with s.dump() as b:
            b.record_state({"w": big})
        with s.load() as b:
            b.record_state({"w": big.half().float()})
    assert s.results["load"]["outcome"] == "mismatch"
    live.assert_no_drops()


def test_engine_side_fingerprints_and_a_two_sided_transfer(live):
    """An engine that fingerprints its own weights (in its workers) hands back digests only:
    ``record_fingerprints`` compares them with the dump; the sender's half of a transfer travels in
    the handoff and ``add_seconds`` counts it in the receiver's transfer boundary."""
    state = _state()
    fps = fingerprints(state)
    trainer = WeightSyncProbe(required=("dump",))
    generator = WeightSyncProbe(required=("transfer", "load", "cache_reset"))
    with trainer.sync(9, expected=[*state, "lm_head.weight"], end_to_end=False) as ts:
        with ts.dump() as b:
            b.record_fingerprints({k: v for k, v in fps.items()}, nbytes=1000)
        handoff = {**ts.handoff(), "sender_s": 0.25}
    dump = ts.results["dump"]
    assert (dump["outcome"], dump["tensors_expected"], dump["tensors_present"], dump["bytes"]) == ("mismatch", 4, 3, 1000)
    assert json.loads(dump["missing_tensors"]) == ["lm_head.weight"]
    with generator.sync(handoff=json.loads(json.dumps(handoff))) as gs:
        with gs.transfer() as b:
            b.bytes = 1000
            b.add_seconds(handoff["sender_s"])
        with gs.load() as b:
            engine = dict(fps)
            engine["norm.weight"] = "0" * 16  # the engine's copy differs
            engine["extra.bias"] = "1" * 16  # engine-only tensors are not the dump's business
            b.record_fingerprints(engine)
        with gs.cache_reset() as b:
            b.requested()
            b.confirmed(True)
    tr, load = gs.results["transfer"], gs.results["load"]
    assert 0.25 <= tr["duration_s"] < 1.0 and tr["bandwidth_bps"] == pytest.approx(1000 / tr["duration_s"])
    assert (load["outcome"], load["fingerprint_match"]) == ("mismatch", False)
    assert json.loads(load["mismatched_tensors"]) == ["norm.weight"]
    assert json.loads(load["missing_tensors"]) == ["lm_head.weight"]  # expected (from the handoff), never loaded
    assert (load["tensors_expected"], load["tensors_present"]) == (4, 3)
    rec = live.close_and_open()
    (start, dur), = rows(rec, "select start_ns, duration_s from weight_sync where boundary = 'transfer'")
    assert dur >= 0.25 and start <= time.time_ns() - 250_000_000


def test_path_and_bandwidth_are_recorded_on_every_boundary_that_moves_bytes():
    probe = WeightSyncProbe(required=())
    with probe.sync(4) as s:
        for name in ("dump", "staging", "transfer", "load"):
            with s.boundary(name) as b:
                time.sleep(0.01)
                b.bytes, b.path = 1 << 20, "shm"
        with s.cache_reset() as b:
            b.path = "shm"
            b.requested()
            b.confirmed(True)
    for name in ("dump", "staging", "transfer", "load"):
        r = s.results[name]
        assert r["path"] == "shm" and r["bandwidth_bps"] == pytest.approx((1 << 20) / r["duration_s"])
    assert s.results["cache_reset"]["path"] == "shm" and "bandwidth_bps" not in s.results["cache_reset"]


def test_staging_buffer_is_shared_memory_another_mapping_sees_without_a_copy():
    from probes.staging import views

    buf = StagingBuffer()
    try:
        buf.write({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, dtype=np.int64)}, version=7)
        h = buf.handle()
        assert h["path"].startswith("/dev/shm/") and h["version"] == 7 and h["seq"] == 2
        v, seq = views(h)
        assert np.array_equal(v["a"], np.arange(6).reshape(2, 3)) and seq() == 2
        buf.write({"a": np.zeros((2, 3), dtype=np.float32), "b": np.ones(3, dtype=np.int64)}, version=8)
        assert v["a"].sum() == 0 and seq() == 4  # the same pages: written in place, seen through the mapping
        assert buf.read(copy=False).payload["a"].base is not None
    finally:
        buf.close()
