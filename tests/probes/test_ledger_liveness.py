"""Sample ledger (exactly once, resume) and liveness (heartbeats, phases)."""

from __future__ import annotations

import json
import time

import pytest

from probes.goodput import GoodputAccount
from probes.ledger import SampleLedger
from probes.liveness import Liveness, phase_name
from tests.probes.conftest import rows


def test_exactly_once_transitions_and_double_transitions_reported(live):
    led = SampleLedger()
    assert led.generated("s1", group_id="g1", tokens=10)
    assert led.graded("s1")
    assert led.consumed("s1", staleness=2, age_s=1.5)
    assert led.generated("s2", group_id="g1", tokens=7)
    assert led.dropped("s2", "stale", age_s=9.0)
    assert led.generated("s3", group_id="g2", tokens=5)
    # violations: consumed twice, graded after it ended, dropped after consumed
    assert not led.consumed("s1", staleness=3)
    assert not led.graded("s2")
    assert not led.dropped("s1", "ttl")
    report = led.check()
    assert report.counts == {"generated": 3, "graded": 2, "consumed": 1, "dropped": 2}
    assert report.open_samples == ["s3"]
    assert [(v.sample_id, v.state, v.previous) for v in report.violations] == [
        ("s1", "consumed", ("generated", "graded", "consumed")),
        ("s2", "graded", ("generated", "dropped")),
        ("s1", "dropped", ("generated", "graded", "consumed")),
    ]
    assert not report.ok and led.violation_count == 3

    assert live.value("rlobs_samples_total", state="consumed", reason="") == 2.0
    assert live.value("rlobs_samples_total", state="dropped", reason="stale") == 1.0
    assert live.value("rlobs_ledger_duplicate_transitions_total", state="consumed") == 1.0
    assert live.value("rlobs_ledger_duplicate_transitions_total", state="dropped") == 1.0
    assert live.value("rlobs_sample_staleness_versions_count") == 2.0
    assert live.value("rlobs_sample_staleness_versions_sum") == 5.0
    rec = live.close_and_open()
    got = rows(rec, "select sample_id, group_id, state, reason, tokens, staleness, duplicate from ledger "
                    "order by mono_ns")
    assert got == [
        ("s1", "g1", "generated", None, 10, None, None), ("s1", "g1", "graded", None, 10, None, None),
        ("s1", "g1", "consumed", None, 10, 2, None), ("s2", "g1", "generated", None, 7, None, None),
        ("s2", "g1", "dropped", "stale", 7, None, None), ("s3", "g2", "generated", None, 5, None, None),
        ("s1", "g1", "consumed", None, None, 3, True), ("s2", "g1", "graded", None, None, None, True),
        ("s1", "g1", "dropped", "ttl", None, None, True),
    ]


def test_unknown_state_or_reason_is_a_configuration_error():
    led = SampleLedger()
    with pytest.raises(ValueError, match="valid: generated"):
        led.transition("x", "eaten")
    with pytest.raises(ValueError, match="valid: stale"):
        led.dropped("x", "bored")


def test_resume_keeps_checking_against_the_state_before_the_crash(tmp_path, live):
    acct = GoodputAccount()
    led = SampleLedger(goodput=acct)
    for i in range(4):
        led.generated(f"s{i}", group_id="g", tokens=10 + i)
    led.consumed("s0")
    led.dropped("s1", "ttl")
    path = tmp_path / "ckpt" / "ledger.json"
    led.save(path)
    assert json.loads(path.read_text())["tokens"] == {"s2": 12, "s3": 13}

    resumed = SampleLedger.load(path, goodput=acct)
    assert resumed.open_samples() == ["s2", "s3"]
    assert resumed.state_of("s0") == ("generated", "consumed")
    assert resumed.tokens_of("s3") == 13
    # the resumed trainer replays s0 (already consumed before the crash): a duplicate
    assert not resumed.consumed("s0")
    assert resumed.consumed("s2")
    assert resumed.dropped("s3", "aborted")
    assert resumed.open_samples() == []
    assert [(v.sample_id, v.state) for v in resumed.violations] == [("s0", "consumed")]
    assert acct.totals["expired"] == [11, 1] and acct.totals["aborted"] == [13, 1]
    assert live.value("rlobs_ledger_duplicate_transitions_total", state="consumed") == 1.0


def test_load_refuses_an_unknown_format(tmp_path):
    p = tmp_path / "l.json"
    p.write_text(json.dumps({"format": 99, "states": [], "samples": {}}))
    with pytest.raises(ValueError, match="format 99"):
        SampleLedger.load(p)


def test_phases_emit_heartbeats_and_durations(live):
    lv = Liveness()
    with lv.phase("generate", tokens=100):
        assert lv.current_phase == "generate"
        time.sleep(0.02)
    with lv.phase("train") as h:
        h.tokens = 40
        with lv.phase("sync"):
            assert lv.current_phase == "sync"
        assert lv.current_phase == "train"
    with pytest.raises(RuntimeError):
        with lv.phase("grade"):
            raise RuntimeError("grader crashed")
    assert lv.current_phase == "idle"
    totals = lv.totals()
    assert set(totals) == {"generation", "training", "sync", "grading"}
    assert totals["generation"]["tokens"] == 100 and totals["training"]["tokens"] == 40
    assert totals["generation"]["seconds"] >= 0.02
    phases = [(e["phase"], e["tokens"]) for e in live.events("phase")]
    assert phases == [("generation", 100), ("sync", None), ("training", 40), ("grading", None)]
    assert [e["phase"] for e in live.events("heartbeat")] == ["generate", "train", "sync", "grade"]
    assert live.value("rlobs_phase_tokens_total", phase="generation") == 100.0
    assert live.value("rlobs_phase_seconds_total", phase="generation") >= 0.02
    assert live.value("rlobs_heartbeats_total") == 4.0
    assert live.value("rlobs_heartbeat_timestamp_seconds", phase="sync") > 1.7e9
    rec = live.close_and_open()
    assert rows(rec, "select count(*) from phase")[0][0] == 4


def test_background_heartbeat_names_the_stuck_phase(live):
    lv = Liveness(interval_s=0.05).start()
    try:
        with lv.phase("train"):
            time.sleep(0.4)  # "stuck" in train
    finally:
        lv.stop()
    beats = live.events("heartbeat")
    stuck = [b for b in beats if b["detail"].startswith("in train for")]
    assert len(stuck) >= 2
    assert all(b["phase"] == "train" for b in stuck)


def test_phase_names_map_both_ways():
    assert phase_name("train") == "training" and phase_name("training") == "training"
    assert phase_name("custom") == "custom"
