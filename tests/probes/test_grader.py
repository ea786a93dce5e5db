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
