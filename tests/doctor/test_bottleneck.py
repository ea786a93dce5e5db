"""Trainer-side bottlenecks and selection bias, on records written through the real recorder."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import rlobs
from rlobs.doctor import Severity, diagnose


def _recs(run: Path, mode: str = "separate_async") -> dict[str, rlobs.Recorder]:
    return {c: rlobs.init(run, component=c, prometheus=False, set_global=False, flush_interval=3600,
                          config={"mode": mode, "max_staleness": 2})
            for c in ("driver", "trainer", "generator", "grader")}


def _close(recs: dict[str, rlobs.Recorder]) -> None:
    for r in recs.values():
        assert r.flush(10.0)
        r.close()


def _slow_grader_run(run: Path, *, per_call_events: bool, step_phases: bool, reward_wait: bool,
                     seed: int = 0, slow_from: int | None = 6) -> Path:
    """The case nobody scripted: a grader at 0.2 s per call from step 6; the trainer's data wait goes
    0.05 -> 0.3 s against a 0.03 s optimiser step."""
    rng = random.Random(seed)
    recs = _recs(run)
    t = 0.0
    for step in range(16):
        slow = slow_from is not None and step >= slow_from
        grade = (0.25 if slow else 0.02) + rng.uniform(0, 0.01)
        gen = 0.04 + rng.uniform(0, 0.01)
        wait = (0.3 if slow else 0.05) + rng.uniform(-0.01, 0.01)
        recs["trainer"].emit("train_step", step=step, loss=0.5, grad_norm=1.0 + rng.uniform(0, 0.1), step_seconds=0.03,
                             data_wait_s=wait, reward_wait_s=(grade if reward_wait else None))
        if step_phases:
            recs["grader"].emit("phase", step=step, phase="grading", seconds=grade)
            recs["generator"].emit("phase", step=step, phase="generation", seconds=gen)
        if per_call_events:
            for i in range(4):
                recs["grader"].emit("grader_call", step=step, sample_id=f"s{step}-{i}", grader_kind="rule",
                                    latency_s=(0.2 if slow else 0.01), queue_wait_s=0.0, outcome="ok", reward=1.0)
        t += wait + 0.03
    _close(recs)
    return run


@pytest.mark.parametrize("what", ["reward_wait", "step_phases_only", "per_call_only"])
def test_slow_grader_found_naming_grading(tmp_path: Path, what: str):
    run = _slow_grader_run(tmp_path / what, per_call_events=what == "per_call_only",
                           step_phases=what == "step_phases_only", reward_wait=what == "reward_wait")
    with rlobs.open_run(run) as rec:
        rep = diagnose(rec)
    starved = [f for f in rep.findings if f.rule == "trainer-starved"]
    assert starved, [f.rule for f in rep.findings]
    f = starved[0]
    assert "waiting for grading" in f.title and f.root_cause.startswith("grading holds the trainer")
    assert f.first_step in (6, 7)
    stage = next(e for e in f.evidence if e.metric.startswith("upstream stage"))
    assert stage.metric == "upstream stage: grading"


def test_healthy_waits_are_not_starvation(tmp_path: Path):
    run = _slow_grader_run(tmp_path / "h", per_call_events=True, step_phases=True, reward_wait=True, slow_from=None)
    with rlobs.open_run(run) as rec:
        rep = diagnose(rec, rule_ids=["trainer-starved"])
    assert rep.findings == []


def _ledger_run(run: Path, *, biased: bool, seed: int = 0, n_drop: int = 520, reward_gap: bool = False,
                overlap: bool = False, reward_by_length: bool = False) -> Path:
    """separate_async throughput workload: 1800 samples, 520 dropped as stale; dropped ones avg 17.7 tokens,
    consumed ones 4.2 (biased; ``overlap``: 14 and 8, sd 4, so every length has both) or the same lengths
    (unbiased). ``reward_gap``: graded rewards, the dropped samples' 0.4 below the consumed ones' at every
    length; ``reward_by_length``: graded rewards that depend on the length alone (0.9 under 11 tokens, 0.2 from
    11), as long answers fail more often."""
    rng = random.Random(seed)
    recs = _recs(run)
    n = 1800
    for i in range(n):
        drop = i < n_drop
        if biased and overlap:
            tokens = max(1, round(rng.gauss(14, 4) if drop else rng.gauss(8, 4)))
        elif biased:
            tokens = max(1, round(rng.gauss(17.7, 5))) if drop else max(1, round(rng.gauss(4.2, 1.5)))
        else:
            tokens = max(1, round(rng.gauss(6.0, 3)))
        sid = f"s{i}"
        step = i // 64
        recs["generator"].emit("rollout", step=step, sample_id=sid, group_id=f"g{i // 8}", completion_tokens=tokens)
        recs["driver"].emit("ledger", step=step, sample_id=sid, group_id=f"g{i // 8}", state="generated", tokens=tokens)
        if reward_gap or reward_by_length:
            p = (0.9 if tokens < 11 else 0.2) if reward_by_length else (0.2 if drop else 0.6)
            recs["grader"].emit("grader_call", step=step, sample_id=sid, grader_kind="rule", latency_s=0.01,
                                outcome="ok", reward=float(rng.random() < p))
        if drop:
            recs["driver"].emit("ledger", step=step + 1, sample_id=sid, state="dropped", reason="stale", staleness=3)
        else:
            recs["driver"].emit("ledger", step=step + 1, sample_id=sid, state="consumed", staleness=1)
    _close(recs)
    return run


def test_length_biased_drops_are_reported_with_the_ratio(tmp_path: Path):
    with rlobs.open_run(_ledger_run(tmp_path / "b", biased=True)) as rec:
        rep = diagnose(rec, rule_ids=["selection-bias"])
    assert len(rep.findings) == 1
    f = rep.findings[0]
    assert "520 of 1800 samples dropped as stale" in f.title
    length = next(e for e in f.evidence if "completion tokens" in e.metric)
    assert length.observed == pytest.approx(17.7 / 4.2, rel=0.05)
    assert "dropped avg 17." in length.note and "consumed 4." in length.note
    # a length-only bias with under half the samples dropped is what bounded staleness does: reported as info,
    # with the share of generated tokens the trainer never saw
    assert f.severity == Severity.INFO
    tokens = next(e for e in f.evidence if e.metric.startswith("generated tokens dropped"))
    assert tokens.observed == pytest.approx(520 * 17.7 / (520 * 17.7 + 1280 * 4.2), abs=0.03)


@pytest.mark.parametrize("case", ["reward_gap", "reward_gap_overlapping_lengths", "most_dropped"])
def test_selection_bias_that_changes_the_gradient_is_a_warning(tmp_path: Path, case: str):
    run = _ledger_run(tmp_path / case, biased=True, reward_gap=case.startswith("reward_gap"),
                      overlap=case.endswith("overlapping_lengths"), n_drop=1100 if case == "most_dropped" else 520)
    with rlobs.open_run(run) as rec:
        rep = diagnose(rec, rule_ids=["selection-bias"])
    assert len(rep.findings) == 1 and rep.findings[0].severity == Severity.WARNING
    if case.startswith("reward_gap"):  # a gap at every length: the drops select on the reward itself
        gap = next(e for e in rep.findings[0].evidence if e.metric.endswith("mean reward at the same length"))
        assert gap.observed == pytest.approx(-0.4, abs=0.1)
        assert "at the same length" in rep.findings[0].title


def test_a_reward_gap_that_the_lengths_explain_is_info_with_the_gap_shown(tmp_path: Path):
    """Long answers fail more often and go stale first: the dropped samples' raw reward is far under the consumed
    ones', but at the same length it is the same. The rule before 6 Dec 2026 (``length_strata`` 1: the raw means)
    warned; it is the length bias, reported at info with the raw gap and the reason."""
    run = _ledger_run(tmp_path / "len", biased=True, overlap=True, reward_by_length=True)
    with rlobs.open_run(run) as rec:
        rep = diagnose(rec, rule_ids=["selection-bias"])
        raw = diagnose(rec, rule_ids=["selection-bias"], thresholds={"selection-bias": {"length_strata": 1}})
    (f,) = rep.findings
    assert f.severity == Severity.INFO
    shown = next(e for e in f.evidence if e.metric.endswith("dropped vs consumed mean reward"))
    assert shown.observed < -0.25 and "their length explains it" in shown.note
    assert not any(e.metric.endswith("at the same length") for e in f.evidence)
    (old,) = raw.findings
    assert old.severity == Severity.WARNING and any(e.metric.endswith("mean reward") for e in old.evidence)


def test_unbiased_drops_are_not_a_finding(tmp_path: Path):
    with rlobs.open_run(_ledger_run(tmp_path / "u", biased=False)) as rec:
        rep = diagnose(rec, rule_ids=["selection-bias"])
    assert rep.findings == []
