"""Grader probe: outcomes, queue wait, async timeouts, the hung-grader watchdog, reward-wait share."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from probes.grader import GraderProbe
from tests.probes.conftest import rows


def test_sync_calls_outcomes_rewards_and_metrics(live):
    g = GraderProbe(watchdog=False)
    submitted = time.time_ns() - 500_000_000
    assert g.call("exact", lambda a, b: float(a == b), "4", "4", sample_id="s1", submitted_ns=submitted) == 1.0
    assert g.call("exact", lambda: 0, sample_id="s2") == 0
    with pytest.raises(ZeroDivisionError):
        g.call("rule", lambda: 1 / 0, sample_id="s3")
    with pytest.raises(TimeoutError):
        g.call("code", lambda: (_ for _ in ()).throw(TimeoutError("sandbox timed out")), sample_id="s4")
    graded = g.wrap("exact")(lambda x: x * 0.5)
    assert graded(3) == 1.5
    with g.track("judge", sample_id="s6") as h:
        h.reward = 0.25

    assert live.value("rlobs_grader_calls_total", grader_kind="exact", outcome="ok") == 3.0
    assert live.value("rlobs_grader_calls_total", grader_kind="rule", outcome="error") == 1.0
    assert live.value("rlobs_grader_calls_total", grader_kind="code", outcome="timeout") == 1.0
    assert live.value("rlobs_grader_latency_seconds_count", grader_kind="exact") == 3.0
    assert 0.5 <= live.value("rlobs_grader_queue_wait_seconds_sum", grader_kind="exact") < 0.75
    rec = live.close_and_open()
    got = rows(rec, "select sample_id, grader_kind, outcome, reward, error from grader_call order by mono_ns")
    assert got == [("s1", "exact", "ok", 1.0, None), ("s2", "exact", "ok", 0.0, None),
                   ("s3", "rule", "error", None, "ZeroDivisionError: division by zero"),
                   ("s4", "code", "timeout", None, "TimeoutError: sandbox timed out"),
                   (None, "exact", "ok", 1.5, None), ("s6", "judge", "ok", 0.25, None)]


def test_async_calls_with_timeout(live):
    g = GraderProbe(watchdog=False, reward_of=lambda r: r["score"])

    async def judge(delay: float) -> dict:
        await asyncio.sleep(delay)
        return {"score": 0.75}

    async def main() -> None:
        assert await g.acall("judge", judge(0.0), sample_id="a") == {"score": 0.75}
        with pytest.raises(asyncio.TimeoutError):
            await g.acall("judge", judge(5.0), sample_id="b", timeout_s=0.05)

    asyncio.run(main())
    events = live.events("grader_call")
    assert [(e["sample_id"], e["outcome"], e["reward"]) for e in events] == [("a", "ok", 0.75), ("b", "timeout", None)]
    assert 0.05 <= events[1]["latency_s"] < 1.0


def test_hung_grader_detected_by_the_watchdog_within_the_deadline(live):
    deadline, interval = 0.3, 0.05
    detected: list[float] = []
    g = GraderProbe(deadline_s=deadline, interval_s=interval, on_overdue=lambda c: detected.append(time.monotonic()))
    release = threading.Event()
    started = time.monotonic()
    th = threading.Thread(target=lambda: g.call("judge", release.wait, 10, sample_id="hung"), daemon=True)
    th.start()
    g.call("exact", lambda: 1.0)  # a healthy call meanwhile
    try:
        t0 = time.monotonic()
        while not detected and time.monotonic() - t0 < 5:
            time.sleep(0.01)
        assert detected, "watchdog never reported the hung call"
        delay = detected[0] - started
        assert deadline <= delay <= deadline + interval + 0.5  # slack for a loaded 2-core box
        assert [c.sample_id for c in g.overdue_calls] == ["hung"]
        assert live.value("rlobs_grader_overdue_calls", grader_kind="judge") == 1.0
        assert live.value("rlobs_grader_inflight_calls", grader_kind="judge") == 1.0
        assert live.value("rlobs_grader_oldest_inflight_seconds", grader_kind="judge") >= deadline
    finally:
        release.set()
        th.join(5)
    time.sleep(3 * interval)  # the watchdog reports the drained state once
    g.close()
    assert live.value("rlobs_grader_inflight_calls", grader_kind="judge") == 0.0
    assert live.value("rlobs_grader_overdue_calls", grader_kind="judge") == 0.0
    assert len(detected) == 1  # reported once per call
    rec = live.close_and_open()
    got = rows(rec, "select max(overdue), max(deadline_s) from grader_inflight where grader_kind='judge'")
    assert got == [(1, 0.3)]


def test_reward_wait_share():
    g = GraderProbe(watchdog=False)
    time.sleep(0.05)
    with g.waiting():
        time.sleep(0.1)
    w = g.take_wait()
    assert 0.1 <= w < 0.5
    assert g.take_wait() == 0.0
    assert g.wait_share(now=g._share_origin + 2.0) == pytest.approx(w / 2.0)  # waited w of 2 s
    assert 0.0 < g.wait_share() < 1.0
    g.reset_share()
    assert g.wait_share(now=g._share_origin + 1.0) == 0.0


def test_stamped_calls_keep_their_step_so_the_doctor_places_grading_that_lags_training(live):
    """A grader process has no trainer step: stamped calls carry the step they were submitted at and the
    sample's policy version. Here the trainer runs all 7 steps before grading finishes (a fast trainer, a
    grader slowed from step 4): by wall clock every call would land on the last step and the doctor would
    see no change against the baseline; stamped, ``grader-slow`` names step 4."""
    from concurrent.futures import ThreadPoolExecutor

    from rlobs.doctor import diagnose

    for step in range(7):
        live.rec.emit("train_step", step=step, loss=0.0)
    live.rec.set_step(6)  # the context a step-less call would get
    g = GraderProbe(watchdog=False)

    def one(step: int, i: int) -> None:
        with g.track("exact", sample_id=f"s{step}-{i}", step=step, policy_version=max(step - 1, 0)) as h:
            time.sleep(0.2 if step >= 4 else 0.002)
            h.reward = 1.0

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda a: one(*a), [(s, i) for s in range(7) for i in range(4)]))
    g.call("exact", lambda: 1.0, sample_id="unstamped")
    rec = live.close_and_open()
    got = rows(rec, "select step, policy_version, count(*) from grader_call group by all order by 1, 2")
    assert got == [(0, 0, 4), (1, 0, 4), (2, 1, 4), (3, 2, 4), (4, 3, 4), (5, 4, 4), (6, 5, 4), (6, None, 1)]
    slow = [f for f in diagnose(rec).findings if f.rule == "grader-slow"]
    assert [(f.first_step, f.last_step) for f in slow] == [(4, 6)]
