"""The precursor rules and their drift detector: on records of real trainer_ref collapse and healthy runs, and on
series built to probe the detector's edges.

The records are rebuilt (through a real rlobs recorder, into a real run record) from the per-step signals of real
``trainer_ref`` runs (``data/collapse_runs.json``, extracted by ``bench/early_warning.py extract``): the doctor
reads them exactly as it reads a run's own record."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

import rlobs
from rlobs.detect import DriftDetector, drifts, theil_sen
from rlobs.doctor import diagnose
from rlobs.doctor.context import RunContext
from rlobs.doctor.model import Insufficient
from rlobs.doctor.rules.precursors import HACKING, OVERSIZED, PRECURSOR_IDS, PRECURSORS, UNCORRECTED, replay
from rlobs.failures import FAILURES

from bench.early_warning_live import emit_step

DATA = json.loads((Path(__file__).with_name("data") / "collapse_runs.json").read_text())


def _record(tmp_path: Path, name: str, correction_cap: float | None | str = "recorded",
            config: dict | None = None) -> Path:
    """The run's record rebuilt; ``correction_cap``: the cap its staleness events carry ("recorded": the run's own)."""
    run = DATA["runs"][name]
    d = tmp_path / name
    cap = run.get("correction_cap") if correction_cap == "recorded" else correction_cap
    rec = rlobs.init(d, component="trainer", rank=0, run_id=name, prometheus=False, set_global=False,
                     config=config or {"mode": "sync"})
    for row in run["steps"]:
        emit_step(rec, row, correction_cap=cap)
    rec.close()
    return d


def _by_class(cls: str) -> list[str]:
    return [n for n, r in DATA["runs"].items() if r["class"] == cls]


@pytest.mark.parametrize("name", [n for n, r in DATA["runs"].items() if r["class"] != "healthy" and r["expect"]])
def test_a_real_collapse_run_gets_its_early_warning(tmp_path, name):
    run = DATA["runs"][name]
    report = diagnose(rlobs.open_run(_record(tmp_path, name)), rule_ids=list(PRECURSOR_IDS))
    found = {f.rule: f for f in report.findings}
    for fid in run["expect"]:
        assert fid in found, f"{name}: {fid} silent; findings {sorted(found)}, insufficient {report.insufficient}"
        f = found[fid]
        assert f.severity.name == "WARNING" and f.first_step is not None
        names = {e.metric for e in f.evidence}
        assert "expected time to impact" in names
        assert fid in (UNCORRECTED, OVERSIZED, HACKING) or "slope per step (Theil-Sen, last steps)" in names  # levels: no slope
        assert f.remediation and f.root_cause and "early warning" in f.title
        assert f.runbook.endswith(f"{fid}.md")
    assert report.exit_code == 1  # warnings, not critical: nothing has broken yet


@pytest.mark.parametrize("name", _by_class("healthy"))
def test_no_early_warning_on_a_real_healthy_run(tmp_path, name):
    report = diagnose(rlobs.open_run(_record(tmp_path, name)), rule_ids=list(PRECURSOR_IDS))
    assert not report.findings, [f.title for f in report.findings]


def test_replay_as_the_record_grows_equals_the_whole_record(tmp_path):
    """The first step a precursor warns on, judged step by step with only the steps up to it, is the step the
    finding names on the whole record: the rules never look ahead (what --follow sees is what the bench counts)."""
    for name in DATA["runs"]:
        rec = rlobs.open_run(_record(tmp_path, name))
        grown = replay(RunContext(rec))
        whole = {f.rule: f.first_step for f in diagnose(rec, rule_ids=list(PRECURSOR_IDS)).findings}
        assert {k: v for k, v in grown.items() if v is not None} == whole, name


def test_thresholds_come_from_the_failure_table():
    from rlobs.doctor import registry

    for fid in PRECURSOR_IDS:
        assert FAILURES[fid].alert and FAILURES[fid].rule
        assert dict(registry()[fid].thresholds) == dict(FAILURES[fid].thresholds)


def test_a_run_without_the_signal_is_insufficient_data(tmp_path):
    d = tmp_path / "nokl"
    rec = rlobs.init(d, component="trainer", run_id="nokl", prometheus=False, set_global=False)
    for s in range(12):
        rec.set_step(s)
        rec.emit("train_step", loss=0.0, grad_norm=1.0, reward_mean=0.3, entropy=0.9)
    rec.close()
    report = diagnose(rlobs.open_run(d), rule_ids=list(PRECURSOR_IDS))
    assert "precursor-kl-creep" in report.insufficient and "precursor-importance-truncation" in report.insufficient
    assert UNCORRECTED in report.insufficient and "policy_kl" in report.insufficient[OVERSIZED]
    assert not report.findings


def test_entropy_decline_is_silent_on_a_solved_policy_and_warns_on_one_that_is_not(tmp_path):
    """The same entropy fall (0.9 -> 0.05 from step 15, the rule's 0.8 effect and more) on a flat training reward:
    at 0.3 the policy sharpens without learning (a warning); at 0.8, over ``solved_reward``, it is a solved task's
    policy converging (silent, as the zero-std rule on a solved task; the forty-sixth early-warning run)."""
    th = FAILURES["precursor-entropy-decline"].thresholds
    found = {}
    for reward in (0.3, 0.8):
        d = tmp_path / f"r{reward}"
        rec = rlobs.init(d, component="trainer", run_id=f"r{reward}", prometheus=False, set_global=False)
        for s in range(30):
            rec.set_step(s)
            wobble = 0.01 * (s % 3)  # a little noise for the robust sigma
            rec.emit("train_step", loss=0.0, grad_norm=1.0, reward_mean=reward + wobble,
                     entropy=(0.9 if s < 15 else 0.05) + wobble)
        rec.close()
        found[reward] = diagnose(rlobs.open_run(d), rule_ids=["precursor-entropy-decline"]).findings
    assert 0.3 < th["solved_reward"] <= 0.8
    assert [f.rule for f in found[0.3]] == ["precursor-entropy-decline"] and found[0.3][0].first_step >= 15
    assert found[0.8] == []


# ---------- stale samples without importance correction ----------
STALE = next(n for n, r in DATA["runs"].items() if UNCORRECTED in r["expect"])
CONTROL = next(n for n, r in DATA["runs"].items() if r["class"] == "healthy" and r.get("correction_cap") == 0)


def test_uncorrected_off_policy_warns_on_the_real_stale_run_and_names_the_fix(tmp_path):
    report = diagnose(rlobs.open_run(_record(tmp_path, STALE)), rule_ids=[UNCORRECTED])
    (f,) = report.findings
    run = DATA["runs"][STALE]
    th = FAILURES[UNCORRECTED].thresholds
    ess = [r["ess"] for r in run["steps"] if r["step"] <= f.first_step]
    stale = [r["staleness"] for r in run["steps"] if r["step"] <= f.first_step]
    w = int(th["window"])

    def window(xs: list[float], back: int) -> list[float]:  # the window ``back`` steps before the finding's
        return xs[len(xs) - back - w:len(xs) - back]

    def holds(back: int) -> bool:  # either leg, judged on the window ending ``back`` steps before the finding
        st = statistics.median(window(stale, back))
        k = 1 if st >= th["fast_staleness"] else int(th["min_steps"])  # far behind: one
        median_leg = all(statistics.median(window(ess, back + b)) < th["ess_below"] for b in range(k))
        far_leg = (st >= th["far_staleness"]
                   and sum(v < th["ess_below"] for v in window(ess, back)) >= th["far_min_below"])
        return median_leg or far_leg

    assert holds(0) and not holds(1)  # the finding's step is the first at which the rule's condition held
    # this run's held-out success fell at step 15 (bench/results/early_warning.json): 5 steps ahead at least
    assert "without importance correction" in f.title and f.first_step <= 10
    assert any("tis-cap" in r or "importance sampling" in r for r in f.remediation)


# staleness-no-is-s74 (the forty-ninth early-warning run, tiny-packed, separate_async, no correction, max staleness
# 8): per step, the importance ratios' ESS and the mean staleness; its held-out success fell at the step-10
# evaluation (0.28 -> 0.08)
S74_ESS = [1.0, 1.0, 0.99, 0.96, 0.94, 0.57, 0.89, 0.88, 0.72, 0.84, 0.40, 0.50, 0.56, 0.28]
S74_STALENESS = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 6.9, 7.9, 6.9, 7.0, 7.0, 5.0, 4.0]


def _stale_record(tmp_path: Path, name: str, staleness: list[float]) -> Path:
    rec = rlobs.init(tmp_path / name, component="trainer", rank=0, run_id=name, prometheus=False, set_global=False,
                     config={"mode": "separate_async"})
    for i, (e, st) in enumerate(zip(S74_ESS, staleness)):
        emit_step(rec, {"step": i, "reward": 0.3, "grad_norm": 0.5, "entropy": 1.0, "ess": e, "staleness": st},
                  correction_cap=0.0)
    rec.close()
    return tmp_path / name


def test_far_behind_two_low_ess_steps_warn_before_the_median_does(tmp_path):
    """The far leg (the fiftieth early-warning run): at a 5-step median staleness of ``far_staleness`` versions,
    ``far_min_below`` of the last 5 steps' ESS under the bar warn. On s74's real series it warns at step 8, two steps
    before the fall, where the 5-step median alone warned at 11; the same ratios at the lag-4 family's bound (staleness
    held at 4, which the far leg cannot reach) get the median leg's warning only."""
    far = diagnose(rlobs.open_run(_stale_record(tmp_path, "s74", S74_STALENESS)), rule_ids=[UNCORRECTED])
    (f,) = far.findings
    assert f.first_step == 8 and "2 of the last 5 steps" in f.title
    th = {**FAILURES[UNCORRECTED].thresholds, "far_staleness": float("inf")}
    median = diagnose(rlobs.open_run(_stale_record(tmp_path, "s74-median", S74_STALENESS)), rule_ids=[UNCORRECTED],
                      thresholds={UNCORRECTED: th})
    assert [g.first_step for g in median.findings] == [11] and "down to" in median.findings[0].title
    lag4 = diagnose(rlobs.open_run(_stale_record(tmp_path, "lag4", [min(4.0, x) for x in S74_STALENESS])),
                    rule_ids=[UNCORRECTED])
    assert [g.first_step for g in lag4.findings] == [11]


def test_the_same_ratios_with_correction_on_are_not_this_rules_business(tmp_path):
    """The condition that makes it a precursor is the missing correction: the same record with the loss capping
    the ratios at 2 (what truncation handles) is quiet, and one that does not say is insufficient data."""
    on = diagnose(rlobs.open_run(_record(tmp_path / "on", STALE, correction_cap=2.0)), rule_ids=[UNCORRECTED])
    assert not on.findings and UNCORRECTED not in on.insufficient
    unknown = diagnose(rlobs.open_run(_record(tmp_path / "unknown", STALE, correction_cap=None)),
                       rule_ids=[UNCORRECTED])
    assert not unknown.findings and "correct" in unknown.insufficient[UNCORRECTED]


def test_records_before_schema_1_4_read_the_cap_from_the_run_config(tmp_path):
    d = _record(tmp_path, STALE, correction_cap=None, config={"mode": "separate_async", "tis_cap": 0.0})
    assert [f.rule for f in diagnose(rlobs.open_run(d), rule_ids=[UNCORRECTED]).findings] == [UNCORRECTED]


def test_no_correction_at_a_small_lag_is_quiet(tmp_path):
    """The real control: separate_async without IS at max staleness 2 learns, and its ESS stays high."""
    assert DATA["runs"][CONTROL]["steps"][-1]["staleness"] > 0
    assert not diagnose(rlobs.open_run(_record(tmp_path, CONTROL)), rule_ids=[UNCORRECTED]).findings


def _with_ess(tmp_path: Path, ess: list[float], staleness: float | None = None) -> Path:
    """The control's record with its ESS replaced (its staleness, or ``staleness``, and the missing correction)."""
    rows = DATA["runs"][CONTROL]["steps"][:len(ess)]
    rec = rlobs.init(tmp_path, component="trainer", rank=0, run_id="ess", prometheus=False, set_global=False,
                     config={"mode": "separate_async"})
    for row, e in zip(rows, ess):
        st = staleness if staleness is not None else max(1.0, row.get("staleness") or 0.0)
        emit_step(rec, {**row, "ess": e, "staleness": st}, correction_cap=0.0)
    rec.close()
    return tmp_path


# the ESS of held-out no-IS control seed 7 (sixth run): three low steps close together
SEED7_BURST = [1.0, 1.0, 0.99, 0.98, 0.98, 0.99, 0.95, 0.96, 0.96, 0.97, 0.98, 0.92, 0.98, 0.98, 0.63, 0.76, 0.96,
               0.97, 0.77, 1.0, 0.99, 0.96, 1.0, 0.93, 0.98]


def test_one_window_of_low_ess_is_a_burst_not_a_trend(tmp_path):
    """A healthy no-IS run at max staleness 2 (held-out seed 7 of the sixth run, its ESS here) has a few low steps
    close together: one 5-step median under the bar, the next above. That is not the sustained loss of ESS the
    staleness collapses show; the same dip held one step longer is."""
    burst = SEED7_BURST
    assert not diagnose(rlobs.open_run(_with_ess(tmp_path / "burst", burst)), rule_ids=[UNCORRECTED]).findings
    held = burst[:19] + [0.7] + burst[20:]
    (f,) = diagnose(rlobs.open_run(_with_ess(tmp_path / "held", held)), rule_ids=[UNCORRECTED]).findings
    assert f.first_step == DATA["runs"][CONTROL]["steps"][19]["step"]


def test_far_behind_one_window_of_low_ess_is_enough(tmp_path):
    """The same burst on samples ``fast_staleness`` versions old (the staleness collapses run at 5-8 by their
    ninth step, and two of them broke by the tenth): the first window under the bar warns."""
    far = FAILURES[UNCORRECTED].thresholds["fast_staleness"]
    far_rec = _with_ess(tmp_path / "far", SEED7_BURST, staleness=far)
    (f,) = diagnose(rlobs.open_run(far_rec), rule_ids=[UNCORRECTED]).findings
    assert f.first_step == DATA["runs"][CONTROL]["steps"][18]["step"]
    near = _with_ess(tmp_path / "near", SEED7_BURST, staleness=far - 1)
    assert not diagnose(rlobs.open_run(near), rule_ids=[UNCORRECTED]).findings


def test_the_lag_without_correction_is_an_info_finding_not_a_warning(tmp_path):
    """staleness-uncorrected: the setup's risk (twenty-second run: as a warning the same condition caught every
    fall and every run that learned), at info. The real staleness-8 run gets it as soon as a 5-step median reaches 3
    versions two steps running; the real no-IS control at max staleness 2 cannot; a median a hair under the bar,
    the correction on, or a record that does not say, stays quiet (the last as insufficient data)."""
    th = FAILURES["staleness-uncorrected"].thresholds
    (f,) = diagnose(rlobs.open_run(_record(tmp_path / "s", STALE)), rule_ids=["staleness-uncorrected"]).findings
    assert f.severity.name == "INFO" and "without importance correction" in f.title
    stale = [r["staleness"] for r in DATA["runs"][STALE]["steps"]]
    w, k = int(th["window"]), int(th["min_steps"])
    i = next(i for i in range(w - 1 + k - 1, len(stale))
             if all(statistics.median(stale[j - w + 1:j + 1]) >= th["min_versions"] for j in range(i - k + 1, i + 1)))
    assert f.first_step == DATA["runs"][STALE]["steps"][i]["step"]
    assert not diagnose(rlobs.open_run(_record(tmp_path / "c", CONTROL)), rule_ids=["staleness-uncorrected"]).findings
    ess = [0.99] * 20
    at = diagnose(rlobs.open_run(_with_ess(tmp_path / "at", ess, staleness=th["min_versions"])),
                  rule_ids=["staleness-uncorrected"]).findings
    assert [g.first_step for g in at] == [DATA["runs"][CONTROL]["steps"][w - 1 + k - 1]["step"]]
    under = _with_ess(tmp_path / "under", ess, staleness=th["min_versions"] - 0.1)
    assert not diagnose(rlobs.open_run(under), rule_ids=["staleness-uncorrected"]).findings
    on = diagnose(rlobs.open_run(_record(tmp_path / "on", STALE, correction_cap=2.0)), rule_ids=["staleness-uncorrected"])
    assert not on.findings and "staleness-uncorrected" not in on.insufficient
    unknown = diagnose(rlobs.open_run(_record(tmp_path / "u", STALE, correction_cap=None)),
                       rule_ids=["staleness-uncorrected"])
    assert not unknown.findings and "correct" in unknown.insufficient["staleness-uncorrected"]


# ---------- oversized policy updates (learning rate too high) ----------
LR_RUN = next((n for n, r in DATA["runs"].items() if OVERSIZED in r["expect"]), None)


@pytest.mark.skipif(LR_RUN is None, reason="no extracted learning-rate collapse run")
def test_oversized_updates_warn_on_the_real_lr_collapse_and_name_the_fix(tmp_path):
    report = diagnose(rlobs.open_run(_record(tmp_path, LR_RUN)), rule_ids=[OVERSIZED])
    (f,) = report.findings
    th = FAILURES[OVERSIZED].thresholds
    w, k = int(th["window"]), int(th["baseline"])
    rows = [r for r in DATA["runs"][LR_RUN]["steps"] if r["step"] <= f.first_step]
    e0 = statistics.median(r["entropy"] for r in DATA["runs"][LR_RUN]["steps"][:k])
    r0 = statistics.median(r["reward"] for r in DATA["runs"][LR_RUN]["steps"][:k])

    def fires(last: list[dict]) -> bool:  # the three conditions, recomputed from the extracted steps
        return (sum(r["policy_kl"] > th["kl_above"] for r in last) >= th["min_steps"]
                and statistics.median(r["entropy"] for r in last) / e0 < th["entropy_share_below"]
                and statistics.median(r["reward"] for r in last) - r0 >= th["reward_gain"])

    assert fires(rows[-w:]) and not any(fires(rows[i - w:i]) for i in range(max(w, k), len(rows)))
    assert f.first_step < DATA["runs"][LR_RUN]["drop_step"]  # ahead of the collapse it names
    assert "learning-rate collapse" in f.title
    assert any("learning rate" in r for r in f.remediation)
    assert {e.metric for e in f.evidence} >= {"train_step.policy_kl", "train_step.lr", "expected time to impact"}


@pytest.mark.skipif(LR_RUN is None, reason="no extracted learning-rate collapse run")
def test_large_steps_on_a_policy_that_has_not_narrowed_are_quiet(tmp_path):
    """The same real updates on a policy whose entropy stays at its early level, or whose reward never climbed
    (an untrained policy moving fast, as the tiny model does at its default lr): not this precursor. Without
    policy_kl: insufficient data."""
    run = DATA["runs"][LR_RUN]
    for name, field in (("_flat", "entropy"), ("_unlearned", "reward")):
        DATA["runs"][name] = {**run, "steps": [{**r, field: run["steps"][0][field]} for r in run["steps"]]}
        try:
            assert not diagnose(rlobs.open_run(_record(tmp_path, name)), rule_ids=[OVERSIZED]).findings, name
        finally:
            del DATA["runs"][name]
    blind = {**run, "steps": [{k: v for k, v in r.items() if k != "policy_kl"} for r in run["steps"]]}
    DATA["runs"]["_blind"] = blind
    try:
        report = diagnose(rlobs.open_run(_record(tmp_path, "_blind")), rule_ids=[OVERSIZED])
        assert not report.findings and OVERSIZED in report.insufficient
    finally:
        del DATA["runs"]["_blind"]


EARLY_RUN = "lr-too-high-s5"  # lr 1.5e-3: 0.05-0.2 nats/token per update from step 0 (healthy lr: 0.001-0.006)


@pytest.mark.skipif(EARLY_RUN not in DATA["runs"], reason="no extracted lr-too-high run")
def test_oversized_updates_from_the_first_steps_are_the_lrs_size(tmp_path):
    """The first-steps leg: ``early_min_steps`` of ``early_window`` updates over ``early_kl_above`` inside the run's
    first ``early_steps`` steps warn with no learning or entropy guard, at the first window that shows it
    (recomputed from the extracted steps), ahead of the drop. It is the run's own first steps: a doctor asked from
    step 15 on does not take those for them, and the healthy runs' first steps (0.001-0.006 nats/token) are nowhere
    near it. The reward-hacking run at lr 7e-4 (large updates for a few steps after Adam's first, then 0.005-0.03,
    as `tiny` at its default lr) does not pass it: a persistence, not a few large first steps."""
    run = DATA["runs"][EARLY_RUN]
    th = FAILURES[OVERSIZED].thresholds
    w = int(th["early_window"])
    rec = rlobs.open_run(_record(tmp_path, EARLY_RUN))
    (f,) = diagnose(rec, rule_ids=[OVERSIZED]).findings
    kl = [(r["step"], r["policy_kl"]) for r in run["steps"]]

    def fires(i: int) -> bool:
        last = [v for _, v in kl[i - w + 1:i + 1]]
        return (sum(v > th["early_kl_above"] for v in last) >= th["early_min_steps"]
                or statistics.median(last) > th["early_median_above"])

    first = next(kl[i][0] for i in range(w - 1, len(kl)) if fires(i))
    assert f.first_step == first < kl[0][0] + th["early_steps"] and "from the run's first steps" in f.title
    assert run["drop_step"] - f.first_step >= 5
    assert {e.metric for e in f.evidence} >= {"train_step.policy_kl", "train_step.lr", "expected time to impact"}
    later = diagnose(rec, rule_ids=[OVERSIZED], since_step=15).findings
    assert all("first steps" not in g.title for g in later)
    for name, r in DATA["runs"].items():
        if r["class"] == "healthy":
            head = [x["policy_kl"] for x in r["steps"][:int(th["early_steps"])] if x.get("policy_kl") is not None]
            assert sum(v > th["early_kl_above"] for v in head) < th["early_min_steps"], name
    hack = DATA["runs"].get(HACK_RUN)
    if hack is not None:  # its first updates are large (0.06-0.21 at steps 1-4) and then shrink
        assert not any("from the run's first steps" in g.title for g in
                       diagnose(rlobs.open_run(_record(tmp_path, HACK_RUN)), rule_ids=[OVERSIZED]).findings)


# policy_kl of a healthy `tiny` run at its default lr 1e-3 (bench.doctor_calib's seventh check, separate_async seed
# 1514, 40 steps, not degenerated): Adam's first updates large (0.07-0.36 at steps 0-6), then 0.001-0.04 with
# single spikes. The first-steps leg's 4 of 5 over 0.05 warned on it at step 4; a too-high lr keeps them large
TINY_DEFAULT_LR_KL = [0.086, 0.0316, 0.0671, 0.2985, 0.0726, 0.0887, 0.3621, 0.0015, 0.0268, 0.0093, 0.0164, 0.2796,
                      0.1896, 0.0376, 0.0038, 0.0101, 0.0027, 0.012, 0.0052, 0.0363, 0.0041, 0.0004, 0.064, 0.0042,
                      0.0035, 0.0047, 0.0041, 0.0017, 0.0004, 0.0009, 0.0008, 0.0085, 0.0038, 0.003, 0.0024, 0.0036,
                      0.0058, 0.0097, 0.0073, 0.003]


@pytest.mark.skipif(EARLY_RUN not in DATA["runs"], reason="no extracted lr-too-high run")
def test_a_few_large_first_updates_that_shrink_are_not_the_first_steps_leg(tmp_path):
    """The real lr-too-high run's steps with the healthy tiny run's updates in place of its own (and its entropy
    held at the first step's, so the guarded leg has nothing to say): no finding; with its own updates: the
    first-steps leg."""
    run = DATA["runs"][EARLY_RUN]
    steps = [{**r, "entropy": run["steps"][0]["entropy"]} for r in run["steps"]]
    DATA["runs"]["_own"] = {**run, "steps": steps}
    DATA["runs"]["_tiny"] = {**run, "steps": [{**r, "policy_kl": v} for r, v in zip(steps, TINY_DEFAULT_LR_KL)]}
    try:
        (own,) = diagnose(rlobs.open_run(_record(tmp_path, "_own")), rule_ids=[OVERSIZED]).findings
        assert "from the run's first steps" in own.title
        assert not diagnose(rlobs.open_run(_record(tmp_path, "_tiny")), rule_ids=[OVERSIZED]).findings
    finally:
        del DATA["runs"]["_own"], DATA["runs"]["_tiny"]


# policy_kl of lr-too-high seed 58's first 12 steps (bench/results/first_steps.json, lr 1.5e-3 on tiny-packed):
# very large updates with three small ones among its first 10 (7 over 0.04, the count's bar is 8), median 0.18
LR_TOO_HIGH_S58_KL = [0.21919, 0.20803, 0.14675, 0.21416, 0.12371, 0.22564, 0.48999, 0.03432, 0.0287, 0.03783,
                      0.00261, 0.21648]


@pytest.mark.skipif(EARLY_RUN not in DATA["runs"], reason="no extracted lr-too-high run")
def test_the_first_steps_median_leg_catches_large_updates_with_a_few_small_ones(tmp_path):
    """The count misses s58's first window (7 of 10 over ``early_kl_above``); its median (0.18) is over
    ``early_median_above``: the leg warns at the window's last step and says which bar. `tiny` at its default lr (the
    seventh check's s1514: a window median of 0.07) stays under it."""
    th = FAILURES[OVERSIZED].thresholds
    w = int(th["early_window"])
    head = LR_TOO_HIGH_S58_KL[:w]
    assert sum(v > th["early_kl_above"] for v in head) < th["early_min_steps"] < w
    assert statistics.median(head) > th["early_median_above"]
    assert max(statistics.median(TINY_DEFAULT_LR_KL[i - w + 1:i + 1])
               for i in range(w - 1, int(th["early_steps"]))) < th["early_median_above"]
    run = DATA["runs"][EARLY_RUN]
    kl = LR_TOO_HIGH_S58_KL + [0.005] * (len(run["steps"]) - len(LR_TOO_HIGH_S58_KL))
    DATA["runs"]["_s58"] = {**run, "steps": [{**r, "entropy": run["steps"][0]["entropy"], "policy_kl": v}
                                            for r, v in zip(run["steps"], kl)]}
    try:
        (f,) = diagnose(rlobs.open_run(_record(tmp_path, "_s58")), rule_ids=[OVERSIZED]).findings
    finally:
        del DATA["runs"]["_s58"]
    assert f.first_step == run["steps"][w - 1]["step"]
    assert "from the run's first steps" in f.title and f"over {th['early_median_above']:g}" in f.title
    (ev,) = [e for e in f.evidence if e.metric == "train_step.policy_kl"]
    assert ev.threshold == th["early_median_above"] and ev.observed == pytest.approx(statistics.median(head), abs=1e-6)


HELDOUT_RUN = "lr-too-high-s5"  # learned held out (0.16 -> 0.42) while its training reward's median barely moved


@pytest.mark.skipif(HELDOUT_RUN not in DATA["runs"], reason="no extracted run that learned held out only")
def test_a_run_that_learned_held_out_only_still_has_something_to_lose(tmp_path):
    """The real lr-too-high run whose training reward climbed under ``reward_gain`` while its held-out success
    climbed more: warned through the held-out leg, ahead of its drop; without held-out evaluations (or with the
    leg off) the same updates are quiet."""
    run = DATA["runs"][HELDOUT_RUN]
    th = FAILURES[OVERSIZED].thresholds
    rec = rlobs.open_run(_record(tmp_path, HELDOUT_RUN))
    (first,) = diagnose(rec, rule_ids=[OVERSIZED]).findings  # since the first-steps leg: its updates from step 0
    assert first.first_step < run["drop_step"] and "from the run's first steps" in first.title
    no_early = {"early_steps": 0}  # the leg that needs the run to have learned, alone
    (f,) = diagnose(rec, rule_ids=[OVERSIZED], thresholds={OVERSIZED: no_early}).findings
    assert first.first_step < f.first_step < run["drop_step"] and "held-out success +" in f.title
    held = {e.metric: e for e in f.evidence}["held-out success (gain over the first evaluation)"]
    assert held.observed >= th["heldout_gain"] == held.threshold
    off = diagnose(rec, rule_ids=[OVERSIZED], thresholds={OVERSIZED: {**no_early, "heldout_gain": math.inf}})
    assert not off.findings
    DATA["runs"]["_no_evals"] = {**run, "steps": [{k: v for k, v in r.items() if k != "heldout"} for r in run["steps"]]}
    try:
        assert not diagnose(rlobs.open_run(_record(tmp_path, "_no_evals")), rule_ids=[OVERSIZED],
                            thresholds={OVERSIZED: no_early}).findings
    finally:
        del DATA["runs"]["_no_evals"]


HACK_RUN = "reward-hacking-s0"  # the verbose grader's loophole on a chain-heavy mix at lr 7e-4


@pytest.mark.skipif(HACK_RUN not in DATA["runs"], reason="no extracted reward-hacking run")
def test_oversized_updates_on_a_loophole_name_the_grader(tmp_path):
    """The real reward-hacking run: warned ahead of its held-out drop, and since its training reward sits far above
    held-out success the finding says so and puts auditing the grader first. A learning-rate collapse whose held-out
    success keeps up with its training reward (lr-too-high seed 5) gets no such line."""
    run = DATA["runs"][HACK_RUN]
    rec = rlobs.open_run(_record(tmp_path, HACK_RUN))
    # the leg that waits for learning is the one that can see the gap (the first steps' leg does not fire here: its
    # large updates shrink after Adam's first steps)
    (f,) = diagnose(rec, rule_ids=[OVERSIZED]).findings
    assert f.first_step < run["drop_step"] and "from the run's first steps" not in f.title
    gap = {e.metric: e for e in f.evidence}["training reward over held-out success"]
    assert gap.observed >= FAILURES[OVERSIZED].thresholds["hacking_gap"] == gap.threshold
    assert "reward hacking" in f.root_cause and f.remediation[0].startswith("audit the grader")
    if HELDOUT_RUN in DATA["runs"]:
        (g,) = diagnose(rlobs.open_run(_record(tmp_path, HELDOUT_RUN)), rule_ids=[OVERSIZED],
                        thresholds={OVERSIZED: {"early_steps": 0}}).findings
        assert "training reward over held-out success" not in {e.metric for e in g.evidence}
        assert "reward hacking" not in g.root_cause and g.remediation[0].startswith("lower the learning rate")


# ---------- reward hacking: the training reward leaving held-out success behind ----------
def _reward_run(tmp_path: Path, name: str, reward: list[tuple[int, float]], evals: list[tuple[int, float]],
                gap: list[float] = ()):
    """A record of the training reward per step, held-out evaluations at their steps and the grader audit's gap
    (one per step from the first)."""
    d = tmp_path / name
    rec = rlobs.init(d, component="trainer", rank=0, run_id=name, prometheus=False, set_global=False)
    held, audit = dict(evals), dict(zip((s for s, _ in reward), gap))
    for s, r in reward:
        emit_step(rec, {"step": s, "reward": r, "heldout": held.get(s), "audit_gap": audit.get(s)})
    rec.close()
    return rlobs.open_run(d)


CLIMB = [(s, 0.3 + min(s, 20) * 0.03) for s in range(40)]  # 0.3 -> 0.9 by step 20: +0.6


def test_reward_hacking_needs_the_reward_to_leave_held_out_success_behind_twice(tmp_path):
    stuck = [(0, 0.2), (5, 0.22), (10, 0.25), (15, 0.28), (20, 0.3), (25, 0.3)]
    # step 15: steps 11-15 average 0.69 against 0.36 for steps 0-4 (+0.33), held-out +0.08 <= 0.11: one running;
    # step 20: +0.48, held-out +0.10 <= 0.16: two (step 10, +0.18, was under the reward bar)
    rec = _reward_run(tmp_path, "stuck", CLIMB, stuck)
    (f,) = diagnose(rec, rule_ids=[HACKING]).findings
    assert f.first_step == 20 and f.rule == HACKING and "reward hacking" in f.title
    ev = {e.metric: e for e in f.evidence}
    gain = ev["train_step.reward_mean (gain over its early level)"]
    assert gain.observed == pytest.approx(0.48, abs=0.005) and gain.threshold == 0.3
    held = ev["held-out success (gain over the first evaluation)"]
    assert held.observed == pytest.approx(0.10) and held.threshold == pytest.approx(0.16, abs=0.005)
    assert ev["evaluations running"].observed == 2 and "expected time to impact" in ev
    assert f.remediation[0].startswith("audit the grader") and f.runbook.endswith(f"{HACKING}.md")
    assert replay(RunContext(rec), rule_ids=[HACKING]) == {HACKING: 20}  # the same step as the record grew


@pytest.mark.parametrize("label,reward,evals", [
    ("held-out success kept up", CLIMB, [(0, 0.2), (5, 0.35), (10, 0.45), (15, 0.6), (20, 0.7), (25, 0.75)]),
    ("one evaluation behind, then caught up", CLIMB, [(0, 0.2), (5, 0.22), (10, 0.25), (15, 0.6), (20, 0.3),
                                                      (25, 0.7)]),
    ("no climb to leave anything behind", [(s, 0.4) for s in range(40)], [(0, 0.2), (5, 0.22), (10, 0.25),
                                                                          (15, 0.28), (20, 0.3), (25, 0.3)]),
])
def test_reward_hacking_is_quiet_when_held_out_success_follows(tmp_path, label, reward, evals):
    assert not diagnose(_reward_run(tmp_path, "r", reward, evals), rule_ids=[HACKING]).findings, label


def test_reward_hacking_without_held_out_evaluations_or_an_audit_is_insufficient_data(tmp_path):
    report = diagnose(_reward_run(tmp_path, "noeval", CLIMB, []), rule_ids=[HACKING])
    assert not report.findings and "held-out evaluations" in report.insufficient[HACKING]
    assert "grader audit" in report.insufficient[HACKING]


def _audited_run(tmp_path: Path, name: str, gap: list[float]):
    """A run whose training reward climbs (CLIMB) with the grader audit's gap per step, no held-out evaluations."""
    return _reward_run(tmp_path, name, CLIMB[:len(gap)], [], gap)


def test_reward_hacking_audit_leg_reads_the_exact_check_on_the_training_samples(tmp_path):
    """The training reward pays more and more than an exact check on the same samples (the loophole's share
    grows): warned from the audit alone, no held-out evaluation needed."""
    th = FAILURES[HACKING].thresholds
    growing = [0.3 + 0.03 * s for s in range(20)]  # 0.3 -> 0.87
    rec = _audited_run(tmp_path, "audit", growing)
    (f,) = diagnose(rec, rule_ids=[HACKING]).findings
    # the 5-step mean at step i is 0.24 + 0.03 i: over 0.4 from step 6, 0.2 over the first five's 0.36 from step 11
    # (0.57); two steps running: step 12 (0.60, +0.24)
    assert f.first_step == 12 and "audit grader" in f.title
    ev = {e.metric: e for e in f.evidence}
    level = ev["grader audit gap (training reward - audit grader, same samples)"]
    assert level.observed == pytest.approx(0.60) and level.threshold == th["audit_above"]
    assert ev["grader audit gap (rise over its early level)"].observed == pytest.approx(0.24)
    assert replay(RunContext(rec), rule_ids=[HACKING]) == {HACKING: 12}


def test_reward_hacking_audit_leg_on_a_fast_loophole_names_the_step_the_record_showed_it(tmp_path):
    """A loophole found at step 3: the 5-step mean passes both bars at step 6 (0.66, +0.28 over the first five's
    0.38) and again at 7: warned at 7, the same step whether the record is judged whole or step by step."""
    rec = _audited_run(tmp_path, "fast", [0.1] * 3 + [0.8] * 17)
    (f,) = diagnose(rec, rule_ids=[HACKING]).findings
    assert f.first_step == 7
    assert replay(RunContext(rec), rule_ids=[HACKING]) == {HACKING: 7}


@pytest.mark.parametrize("label,gap", [
    ("a shaped reward's partial credit shrinking as the policy learns", [0.2 - 0.01 * s for s in range(20)]),
    ("a generous grader from the first step, not growing", [0.5] * 20),
    ("partial credit growing as the policy learns the format, under the level", [0.02 * s for s in range(20)]),
])
def test_reward_hacking_audit_leg_is_quiet_without_a_growing_loophole(tmp_path, label, gap):
    assert not diagnose(_audited_run(tmp_path, "a", gap), rule_ids=[HACKING]).findings, label


# ---------- the detector ----------
def test_constant_and_noisy_flat_series_never_alarm():
    import random

    rng = random.Random(0)
    assert not drifts([(s, 1.0) for s in range(200)], +1)
    assert not drifts([(s, 0.5 + rng.gauss(0, 0.05)) for s in range(300)], -1)
    assert not drifts([(s, math.exp(rng.gauss(0, 0.3))) for s in range(300)], +1, log=True, min_effect=1.0)


def test_one_outlier_is_not_a_trend():
    xs = [(s, 1.0) for s in range(30)]
    xs[15] = (15, 50.0)
    assert not drifts(xs, +1, log=True)


def test_a_ramp_alarms_with_onset_slope_and_time_to_impact():
    xs = [(s, 1.0 if s < 10 else 1.0 - 0.05 * (s - 9)) for s in range(25)]
    det = DriftDetector(-1, min_effect=0.3, target=0.2)
    hits = [d for d in (det.push(s, v) for s, v in xs) if d is not None]
    first = hits[0]
    assert 10 <= first.onset <= first.step < 20
    assert first.effect >= 0.3 and first.slope == pytest.approx(-0.05)
    assert first.eta == pytest.approx((first.level - 0.2) / 0.05)


def test_missing_and_nonfinite_values_are_neither_evidence_nor_baseline():
    det = DriftDetector(+1)
    assert det.push(0, float("nan")) is None and det.push(1, None) is None and det.seen == 0


def test_theil_sen_is_robust():
    pts = [(float(i), 2.0 * i) for i in range(10)]
    pts[3] = (3.0, 100.0)
    assert theil_sen(pts) == pytest.approx(2.0)
    assert theil_sen([(0.0, 1.0)]) is None


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError):
        DriftDetector(0)
    with pytest.raises(ValueError):
        DriftDetector(1, baseline=2)
    assert isinstance(Insufficient("x"), Insufficient)


LONG = json.loads((Path(__file__).with_name("data") / "healthy_long_runs.json").read_text())
OLD_WINDOW = {"window": 3, "baseline": 4, "lag": 3}  # the fast-drift window before the sixth calibration pass
OLD_EFFECT = {"precursor-grad-norm-drift": {"min_effect": 5.0}}  # and the grad-norm effect of that time (6x, not 10x)


def _long_record(tmp_path: Path, name: str) -> Path:
    d = tmp_path / name
    rec = rlobs.init(d, component="trainer", rank=0, run_id=name, prometheus=False, set_global=False,
                     config={"mode": LONG["runs"][name]["mode"]})
    for row in LONG["runs"][name]["steps"]:
        emit_step(rec, row)
    rec.close()
    return d


def test_long_healthy_runs_with_natural_bursts_get_no_early_warning(tmp_path):
    """Four real healthy runs (50-100 steps) with two-step natural grad-norm bursts of 11-17x and two-step runs of
    all-zero-std groups: the 5-step window is quiet on every one; the old 3-step window (4-step baseline) warned on
    each, so these records do exercise the look-count edge."""
    fast = [p for p in PRECURSORS if FAILURES[p].thresholds.get("lag", 0) > 0]
    for name in LONG["runs"]:
        run_dir = _long_record(tmp_path, name)
        report = diagnose(rlobs.open_run(run_dir), rule_ids=list(PRECURSOR_IDS))
        assert not report.findings, f"{name}: {[(f.rule, f.first_step) for f in report.findings]}"
        old = diagnose(rlobs.open_run(run_dir), rule_ids=fast, thresholds={p: {**OLD_WINDOW, **OLD_EFFECT.get(p, {})} for p in fast})
        assert old.findings, f"{name}: the old window was quiet too; the record no longer probes the edge"


AUDIT_RUN, HELDOUT_LEG_RUN = "reward-hacking-s20", "reward-hacking-s17"  # tenth / ninth run, held-out seeds


@pytest.mark.skipif(AUDIT_RUN not in DATA["runs"] or HELDOUT_LEG_RUN not in DATA["runs"],
                    reason="no extracted reward-hacking runs")
def test_real_reward_hacking_runs_warned_by_each_leg(tmp_path):
    """Seed 17 (no audit recorded): its held-out success stalled at ~0.35 while the training reward reached 0.9; seed
    20: the exact check on its own training samples confirms ever less of its reward, warned at step 10 from the
    audit, while its held-out success climbed enough to keep the held-out leg quiet (without the audit: no finding)."""
    (f,) = diagnose(rlobs.open_run(_record(tmp_path, HELDOUT_LEG_RUN)), rule_ids=[HACKING]).findings
    assert "held-out success moved" in f.title and f.first_step == 25
    (g,) = diagnose(rlobs.open_run(_record(tmp_path, AUDIT_RUN)), rule_ids=[HACKING]).findings
    assert "audit grader" in g.title and g.first_step == 10
    run = DATA["runs"][AUDIT_RUN]
    DATA["runs"]["_no_audit"] = {**run, "steps": [{k: v for k, v in r.items() if k != "audit_gap"} for r in run["steps"]]}
    try:
        assert not diagnose(rlobs.open_run(_record(tmp_path, "_no_audit")), rule_ids=[HACKING]).findings
    finally:
        del DATA["runs"]["_no_audit"]


KL = "precursor-kl-creep"


def test_kl_rising_as_a_run_learns_is_not_a_creep_a_blow_up_is(tmp_path):
    """A real healthy run with the KL term on (healthy-kl-s0: kl_coef 0.05 at lr 3e-4; KL 0 -> 0.44 over 40 steps
    while held-out success climbs 0.23 -> 0.74) gets no KL warning; without the rate bar (min_rate 0) the rule
    warned on it, so the record does probe the bar. The KL blow-up still warns, with its rate as evidence, several
    times over the bar."""
    healthy = _record(tmp_path, "healthy-kl-s0")
    assert not diagnose(rlobs.open_run(healthy), rule_ids=[KL]).findings
    assert diagnose(rlobs.open_run(healthy), rule_ids=[KL], thresholds={KL: {"min_rate": 0.0}}).findings
    blow = diagnose(rlobs.open_run(_record(tmp_path, "kl-blow-up-partial-s0")), rule_ids=[KL]).findings
    assert [f.rule for f in blow] == [KL]
    rate = next(e for e in blow[0].evidence if e.metric.endswith("gained per step since the run's first step"))
    assert rate.observed >= 3 * FAILURES[KL].thresholds["min_rate"] and rate.threshold == FAILURES[KL].thresholds["min_rate"]


def _data_record(tmp_path: Path, file: str, name: str) -> tuple[Path, dict]:
    """A real run's record rebuilt from one of ``data/``'s per-step files (``file``'s run ``name``), and the run."""
    run = json.loads((Path(__file__).with_name("data") / file).read_text())["runs"][name]
    d = tmp_path / name
    rec = rlobs.init(d, component="trainer", rank=0, run_id=name, prometheus=False, set_global=False,
                     config={"mode": run["mode"]})
    for row in run["steps"]:
        emit_step(rec, row)
    rec.close()
    return d, run


def test_a_solved_tasks_steps_without_gradient_are_not_oversized_updates(tmp_path):
    """`make main MODEL=smollm2` (bench/solved_task.py's tune run, a real record): SmolLM2 solves its echo task by
    step 5, all 5 updates before that moved the policy over 0.015 nats/token, then every group is all correct
    and there is no gradient (Adam's momentum alone moves it 3e-5 nats). The precursor warned at step 5 (4 updates of
    steps 1-5 over the bar), the first step without a gradient; it now judges only steps that had one, and this healthy run gets no early warning."""
    d, _ = _data_record(tmp_path, "smollm2_solved.json", "smollm2-main-s0")
    assert not diagnose(rlobs.open_run(d), rule_ids=list(PRECURSOR_IDS)).findings
    # the record still probes the edge: judging every step, and without the solved-policy guard (forty-first run:
    # steps 1-5 are a solved policy's too, most groups all correct; either guard alone holds it), it warns at step 5
    for guards in ({"no_gradient_eps": -1.0}, {"solved_zero_std": math.inf}):
        assert not diagnose(rlobs.open_run(d), rule_ids=[OVERSIZED], thresholds={OVERSIZED: guards}).findings
    old = diagnose(rlobs.open_run(d), rule_ids=[OVERSIZED],
                   thresholds={OVERSIZED: {"no_gradient_eps": -1.0, "solved_zero_std": math.inf}})
    assert [f.first_step for f in old.findings] == [5]


def test_a_solved_policys_update_burst_is_not_oversized_updates(tmp_path):
    """healthy-t07-s214 (thirty-ninth run, a real record): sampling at T 0.7 it solved its task (held out 0.80-0.92),
    7 of 8 groups all correct at most steps, and took a burst of large updates at steps 54-58 (4 of 5 over 0.015
    nats/token, up to 0.15) from the few groups left; trained on to 100 steps it held 0.87-0.91, so the warning the
    rule gave at step 58 was false. The after-learning leg is silent while the window's median zero-std share and
    median training reward say solved; without that guard the same record warns at step 58 (it probes the edge)."""
    d, run = _data_record(tmp_path, "t07_solved.json", "healthy-t07-s214")
    assert not diagnose(rlobs.open_run(d), rule_ids=list(PRECURSOR_IDS)).findings
    old = diagnose(rlobs.open_run(d), rule_ids=[OVERSIZED], thresholds={OVERSIZED: {"solved_zero_std": math.inf}})
    assert [f.first_step for f in old.findings] == [58]
    th = FAILURES[OVERSIZED].thresholds
    window = [r for r in run["steps"] if 54 <= r["step"] <= 58]
    assert statistics.median(r["zero_std"] for r in window) >= th["solved_zero_std"]
    assert statistics.median(r["reward"] for r in window) >= th["solved_reward"]


def test_a_noisy_reward_climb_without_held_out_learning_is_not_oversized_updates(tmp_path):
    """healthy-tiny-s249 (the fifty-fourth run's tune look, a real record): the `tiny` warm start's training reward
    swings 0.2-0.76 step to step and its entropy 0.2-1.06; at step 55 four of the last five updates were over 0.015
    nats/token, the entropy's median 40 % of its early level and the training reward 0.20 over its first 5 steps'
    median, so the rule warned, while held-out success never rose above its first evaluation (0.37). Where held-out
    success is measured, the reward's climb reads as learning only if held-out success gained as well
    (``reward_heldout_floor``): quiet now, and without the floor the same record warns at 55 (it probes the edge)."""
    d, run = _data_record(tmp_path, "oversized_heldout_flat.json", "healthy-tiny-s249")
    assert not diagnose(rlobs.open_run(d), rule_ids=list(PRECURSOR_IDS)).findings
    old = diagnose(rlobs.open_run(d), rule_ids=[OVERSIZED],
                   thresholds={OVERSIZED: {"reward_heldout_floor": -math.inf}}).findings
    assert [f.first_step for f in old] == [55] and "training reward +0.2" in old[0].title
    held = [r["heldout"] for r in run["steps"] if r.get("heldout") is not None and r["step"] <= 55]
    assert len(held) >= 2 and max(held) - held[0] < FAILURES[OVERSIZED].thresholds["reward_heldout_floor"]


@pytest.mark.parametrize(("name", "step"), [("healthy-tiny-s266", 50), ("healthy-tiny-s281", 52)])
def test_held_out_success_is_read_at_its_recent_level_not_its_best_evaluation(tmp_path, name, step):
    """Fifty-fourth run's held-out healthy-tiny-s266 and s281 (real series, the `tiny` warm start): 4 of 5 updates
    over the bar on a narrowed policy, and held-out success's best evaluation +0.16 over its first (the best of 11
    evaluations that swing 0.1-0.2 on noise: s266's at step 10, back under its first by 25). Neither lost anything
    after. Held-out success is read at the mean of its last ``heldout_recent`` evaluations (what the policy holds
    now): quiet; read at its best, the record warns where it did."""
    d, run = _data_record(tmp_path, "oversized_heldout_best_of_noise.json", name)
    assert not diagnose(rlobs.open_run(d), rule_ids=list(PRECURSOR_IDS)).findings
    old = diagnose(rlobs.open_run(d), rule_ids=[OVERSIZED], thresholds={OVERSIZED: {"heldout_recent": 0}}).findings
    assert [f.first_step for f in old] == [step] and "held-out success +0.16" in old[0].title
    held = [r["heldout"] for r in run["steps"] if r.get("heldout") is not None and r["step"] <= step]
    recent = FAILURES[OVERSIZED].thresholds["heldout_recent"]
    assert len(held) > recent + 1 and max(held) - held[0] > statistics.mean(held[-recent:]) - held[0]


def test_a_collapse_whose_held_out_success_already_fell_keeps_its_late_warning(tmp_path):
    """Fifty-fifth run's lr-warmup-too-high-s161 (real series): held-out success 0.16 -> 0.44 by step 15, then 0.23
    at 20 (its drop) and 0.27 at 25, the training reward still +0.20 and 4 of 5 updates over the bar at step 26. The
    floor asks held-out success to have confirmed the climb once (its best, +0.27); read at its recent level
    (+0.09), as the fifty-fifth run did, it took the doctor's only finding on this collapsed run away."""
    d, run = _data_record(tmp_path, "oversized_late_warm_up.json", "lr-warmup-too-high-s161")
    (f,) = diagnose(rlobs.open_run(d), rule_ids=[OVERSIZED]).findings
    assert f.first_step == 26 > run["drop_step"] and "training reward +0.2" in f.title
    held = [r["heldout"] for r in run["steps"] if r.get("heldout") is not None and r["step"] <= 26]
    th = FAILURES[OVERSIZED].thresholds
    recent = statistics.mean(held[-th["heldout_recent"]:]) - held[0]
    assert recent < th["reward_heldout_floor"] <= max(held) - held[0]


@pytest.mark.parametrize("name", [n for n, r in DATA["runs"].items() if OVERSIZED in r["expect"]])
def test_reading_held_out_success_at_its_recent_level_moves_no_collapse_warning(tmp_path, name):
    """Every real collapse run of the tests' data that the rule warns: the same first step whether held-out success
    is read at its recent level or at its best evaluation (they warn after 2-4 evaluations, while learning)."""
    d = _record(tmp_path, name)
    best = diagnose(rlobs.open_run(d), rule_ids=[OVERSIZED], thresholds={OVERSIZED: {"heldout_recent": 0}}).findings
    recent = diagnose(rlobs.open_run(d), rule_ids=[OVERSIZED]).findings
    assert recent and [f.first_step for f in recent] == [f.first_step for f in best]


@pytest.mark.skipif(LR_RUN is None, reason="no extracted learning-rate collapse run")
def test_the_held_out_floor_does_not_hide_a_warm_up_collapse(tmp_path):
    """The too-high warm-up (real record) learned held out before its updates grew: its warning stands at the same
    step with the floor and without it."""
    d = _record(tmp_path, LR_RUN)
    without = diagnose(rlobs.open_run(d), rule_ids=[OVERSIZED],
                       thresholds={OVERSIZED: {"reward_heldout_floor": -math.inf}}).findings
    with_floor = diagnose(rlobs.open_run(d), rule_ids=[OVERSIZED]).findings
    assert with_floor and [f.first_step for f in with_floor] == [f.first_step for f in without]


@pytest.mark.skipif(LR_RUN is None, reason="no extracted learning-rate collapse run")
def test_the_solved_guard_does_not_hide_a_warm_up_collapse(tmp_path):
    """The too-high warm-up's warning window (real record) is far from solved (a quarter of its groups zero-std at
    most): its warning stands where it was, and with its groups made all correct it would be silent (the guard is
    what the two differ in)."""
    d = _record(tmp_path, LR_RUN)
    before = diagnose(rlobs.open_run(d), rule_ids=[OVERSIZED],
                      thresholds={OVERSIZED: {"solved_zero_std": math.inf}}).findings
    after = diagnose(rlobs.open_run(d), rule_ids=[OVERSIZED]).findings
    assert [f.first_step for f in after] == [f.first_step for f in before] and after
    run = DATA["runs"][LR_RUN]
    DATA["runs"]["_solved"] = {**run, "steps": [{**r, "zero_std": 1.0, "reward": max(r["reward"], 0.9)}
                                                for r in run["steps"]]}
    try:
        late = diagnose(rlobs.open_run(_record(tmp_path, "_solved")), rule_ids=[OVERSIZED]).findings
        assert all("from the run's first steps" in f.title for f in late), [f.title for f in late]
    finally:
        del DATA["runs"]["_solved"]


def test_two_kl_spikes_on_a_healthy_kl_term_run_are_not_a_creep(tmp_path):
    """Two real healthy runs with a KL term (data/kl_spikes.json: separate_async, kl_coef 0.01; held-out success 0.22
    -> 0.77 and -> 0.82) each logged two reference-KL spikes two steps apart (the k3 estimator is unbounded above:
    22.3 and 8.8 nats/token on s228, 31.3 and 815 on s230, between readings of 0.01-0.1). The KL-creep rule's median
    of the last 3 steps is a spike then, and it warned at steps 8 and 19; a creep holds, so the alarm must hold two
    steps running (min_alarms, forty-third early-warning run): no precursor warns on either run."""
    kl = "precursor-kl-creep"
    assert FAILURES[kl].thresholds["min_alarms"] == 2
    for name, step in (("healthy-async-kl-s228", 8), ("healthy-async-kl-s230", 19)):
        d, run = _data_record(tmp_path, "kl_spikes.json", name)
        spikes = [r["step"] for r in run["steps"] if (r.get("kl") or 0) > 5]
        assert spikes == [step - 2, step], spikes
        assert not diagnose(rlobs.open_run(d), rule_ids=list(PRECURSOR_IDS)).findings, name
        one = diagnose(rlobs.open_run(d), rule_ids=[kl], thresholds={kl: {"min_alarms": 1}})
        assert [f.first_step for f in one.findings] == [step], name


def test_a_healthy_kl_term_runs_clipped_spike_is_not_critical(tmp_path):
    """The same healthy KL-term runs' k3 spikes moved their pre-clip grad norm too (56.6 on s228 at step 6, 12.2 on
    s229 at step 4). `grad-norm-spike` called them critical: within 3 steps the KL's median was 10x its median
    before, which a KL near 0 in a run's first steps passes while the run learns. The consequence now also asks the
    KL's rise per step since the run's first step at the KL-creep rule's min_rate (forty-fourth early-warning run):
    the spikes are findings still, info (clipped, the run kept its trend), no longer critical."""
    from rlobs.doctor import Severity

    rule = "grad-norm-spike"
    for name, step in (("healthy-async-kl-s228", 6), ("healthy-async-kl-s229", 4)):
        d, _ = _data_record(tmp_path, "kl_spikes.json", name)
        now = diagnose(rlobs.open_run(d), rule_ids=[rule]).findings
        # clipped at max norm 1 and absorbed: informational, as on the real records
        assert [(f.first_step, f.severity) for f in now] == [(step, Severity.INFO)], name
        assert not any("KL blew up" in e.note for e in now[0].evidence), name
        before = diagnose(rlobs.open_run(d), rule_ids=[rule], thresholds={rule: {"kl_min_rate": 0.0}}).findings
        assert before[0].severity == Severity.CRITICAL, name
        assert any("KL blew up" in e.note for e in before[0].evidence), name
