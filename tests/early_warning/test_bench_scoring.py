"""How bench/early_warning.py scores a run: the drop definitions and the per-class summary."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import early_warning as ew  # noqa: E402


def test_absolute_drop_on_the_training_reward_or_held_out_success():
    flat = [(s, 0.5) for s in range(20)]
    assert ew.drop_step(flat, [(0, 0.3), (5, 0.3)]) == (None, "")
    falling = flat[:10] + [(s, 0.2) for s in range(10, 20)]
    step, why = ew.drop_step(falling, [])
    assert step == 12 and "training reward" in why  # the 5-step mean is 0.32 <= 0.5 - 0.15 on the third low step
    step, why = ew.drop_step(flat, [(0, 0.2), (5, 0.5), (10, 0.34)])
    assert step == 10 and "held-out" in why  # 0.34 <= 0.5 - 0.15


def test_relative_drop_catches_a_low_start_falling_to_nothing():
    evals = [(0, 0.16), (5, 0.14), (10, 0.09), (15, 0.04)]
    assert ew.drop_step([(s, 0.3) for s in range(20)], evals)[0] is None  # never 0.15 below 0.16
    assert ew.relative_drop(evals) == 15  # 0.04 <= 0.16 / 3
    assert ew.relative_drop([(0, 0.1), (5, 0.0)]) is None  # a best under 0.12 is noise at 128 samples


def test_summary_counts_a_mixed_class_run_without_a_drop_as_healthy():
    rows = [
        {"name": "c-s0", "class": "reward-hacking-control", "split": "heldout", "drop_step": None,
         "drop_step_either": None, "first_warning": 12, "per_rule": {"precursor-oversized-updates": 12}},
        {"name": "c-s1", "class": "reward-hacking-control", "split": "heldout", "drop_step": 30,
         "drop_step_either": 30, "first_warning": 20, "per_rule": {"precursor-oversized-updates": 20}},
        {"name": "h-s0", "class": "healthy", "split": "heldout", "drop_step": None, "drop_step_either": 25,
         "first_warning": None, "per_rule": {"precursor-oversized-updates": None}},
    ]
    s = ew.summarise(rows)["heldout"]
    assert s["healthy_runs"] == 2 and s["healthy_with_warning"] == ["c-s0"]
    assert s["classes"]["reward-hacking-control"]["leads"] == [10]
    either = ew.summarise(rows, "drop_step_either")["heldout"]
    assert either["healthy_that_dropped"] == ["h-s0"]


def test_pooling_reads_eval_files_and_live_replays_each_run_once_without_the_seen(tmp_path):
    """`pool` scores stored results as `eval` does: an eval row's per-rule steps, a live replay's `doctor_first`
    (per rule where the file kept it), each run once from the first file that has it, seen runs left out."""
    import json

    evalf, live = tmp_path / "run_doctor.json", tmp_path / "run_live.json"
    evalf.write_text(json.dumps({"runs": [
        {"name": "lr-too-high-s1", "class": "lr-too-high", "seed": 1, "drop_step": 20, "first_warning": 9,
         "per_rule": {"precursor-oversized-updates": 9, "precursor-kl-creep": None}},
        {"name": "x-s0", "class": "exploratory", "drop_step": None, "first_warning": 3,
         "per_rule": {"precursor-kl-creep": 3}}]}))
    live.write_text(json.dumps({"runs": [
        {"name": "lr-too-high-s1", "class": "lr-too-high", "drop_step": 5, "doctor_first": 30,
         "doctor_per_rule": {"precursor-oversized-updates": 30}},  # the same run again: the first file wins
        {"name": "staleness-no-is-lag4-s2", "class": "staleness-no-is-lag4", "drop_step": None, "doctor_first": 8,
         "doctor_per_rule": None},  # an older replay kept no per-rule steps
        {"name": "lr-too-high-s3", "class": "lr-too-high", "drop_step": 12, "doctor_first": 12,
         "doctor_per_rule": {"precursor-oversized-updates": 12}},
        {"name": "healthy-s4", "class": "healthy", "drop_step": None, "doctor_first": None, "doctor_per_rule": {}},
        {"name": "healthy-s5", "class": "healthy", "drop_step": None, "doctor_first": 7,
         "doctor_per_rule": {"precursor-oversized-updates": 7}}]}))
    rows = ew.pooled_rows([evalf, live], seen=frozenset({"healthy-s5"}))
    by = {r["name"]: r for r in rows}
    assert sorted(by) == ["healthy-s4", "lr-too-high-s1", "lr-too-high-s3", "staleness-no-is-lag4-s2"]
    assert by["lr-too-high-s1"]["first_warning"] == 9 and by["lr-too-high-s1"]["source"] == "run_doctor.json"
    assert by["staleness-no-is-lag4-s2"]["first_warning"] == 8
    s = ew.summarise(rows)["heldout"]
    lr = s["classes"]["lr-too-high"]
    assert (lr["collapsed"], lr["warned_early"], lr["leads"], lr["misses"]) == (2, 1, [11], ["lr-too-high-s3"])
    # the mixed-class run without a drop is healthy, and its warning counts against the rules
    assert s["healthy_runs"] == 2 and s["healthy_with_warning"] == ["staleness-no-is-lag4-s2"]
    md = ew.pool_markdown({"sources": ["run_doctor.json", "run_live.json"], "seen": ["healthy-s5"], "runs": rows,
                           "summary": ew.summarise(rows), "note": "Scored under the rules of their time."})
    assert "| lr-too-high | 2 | 2 | 1 | 50% | 11 | 11 | lr-too-high-s3 |" in md and "left out as seen: healthy-s5" in md
    assert md.rstrip().endswith("Scored under the rules of their time.")  # the pool's note, under its table


def test_calib_summary_splits_doctor_calib_runs_by_both_definitions():
    """A doctor_calib run that degenerated is neither; one whose reward dropped (this bench's definition) is scored
    as a collapse: a warning before its drop is a lead, at or after it a miss; the rest are healthy and every warning
    on them counts. The drop's noise share is taken at lr 1e-3 among the runs that did not degenerate."""
    def row(name, lr, degenerated, drop, warn, doctor=()):
        return {"name": name, "lr": lr, "degenerated": degenerated, "drop_step": drop, "first_warning": warn,
                "false_alarms": list(doctor)}

    rows = [row("a", 3e-3, True, 20, 9, ["precursor-oversized-updates:warning@9"]),
            row("b", 3e-3, False, 30, 9, ["precursor-oversized-updates:warning@9"]),
            row("c", 3e-3, False, 8, 9), row("d", 3e-3, False, None, 9, ["x:warning@9"]),
            row("e", 1e-3, False, None, None), row("f", 1e-3, False, 40, None), row("g", 1e-3, True, None, None)]
    assert [ew.calib_verdict(r) for r in rows] == ["degenerated", "dropped", "dropped", "healthy", "healthy",
                                                   "dropped", "degenerated"]
    s = ew.calib_summary(rows)
    hi = s["0.003"]
    assert (hi["degenerated"], hi["dropped"], hi["healthy"], hi["not_degenerated"]) == (1, 2, 1, 3)
    assert hi["leads"] == [21] and hi["dropped_warned_at_or_after"] == ["c"]
    assert hi["precursor_warned"]["healthy"] == ["d"] and hi["doctor_warned"]["dropped"] == ["b"]
    assert s["noise"] == {"runs_at_1e-3_not_degenerated": 2, "dropped": 1, "share": 0.5}
    assert s["drop_tells_collapse_from_noise"] is False


def _record(run_dir: Path, entropy: list[float], reward: list[float]) -> Path:
    import rlobs

    rec = rlobs.init(run_dir, component="trainer", rank=0, set_global=False, prometheus=False)
    try:
        for step, (e, r) in enumerate(zip(entropy, reward, strict=True)):
            rec.set_step(step)
            rec.emit("train_step", loss=0.0, grad_norm=1.0, reward_mean=r, entropy=e)
    finally:
        rec.close()
    return run_dir


def test_degeneration_step_is_where_doctor_calibs_criterion_first_holds(tmp_path):
    """The step a run degenerated at, read from its record: the end of the first 5-step window under 10 % of the
    start (entropy or reward); for the last-quarter rule alone, the start of the final stretch under half; None for
    a run that did not degenerate by doctor_calib's criterion."""
    from bench import doctor_calib as dc

    flat = [1.0] * 40
    entropy_gone = [1.0] * 20 + [0.05] * 20  # the first all-low window is steps 20-24
    assert dc.degeneration_step(_record(tmp_path / "e", entropy_gone, [0.5] * 40)) == 24
    reward_halved = [0.5] * 25 + [0.2] * 15  # 5-step means under 0.25 from the window of steps 25-29 to the end
    assert dc.degenerated(dc.collapsed(_record(tmp_path / "r", flat, reward_halved)))
    assert dc.degeneration_step(tmp_path / "r") == 29
    gap = [None if i == 33 else v for i, v in enumerate(reward_halved)]  # a step without a reward mid-stretch
    assert dc.degeneration_step(_record(tmp_path / "g", flat, gap)) == 29
    dipped = [0.5] * 10 + [0.2] * 6 + [0.5] * 24  # a dip that recovered: not degenerated
    assert dc.degeneration_step(_record(tmp_path / "h", flat, dipped)) is None


def test_a_continued_run_keeps_its_twins_seed_mode_and_shape():
    from bench import doctor_calib as dc

    spec = next(r for r in dc.plan("calib") if not r["fault"] and r["steps"] == 20)
    longer = dc.lengthened(spec, 200)
    assert longer["name"] == spec["name"].replace("-20st-", "-200st-") and longer["continues"] == spec["name"]
    assert {k: longer[k] for k in ("seed", "mode", "shape")} == {k: spec[k] for k in ("seed", "mode", "shape")}
    assert longer["steps"] == 200
    main = dc.lengthened(dc.plan("main")[0], 60)  # a name without its length gets one: never the twin's name
    assert main["name"] != main["continues"] and main["name"].endswith("-60st")


def test_a_lasting_drop_ignores_a_plateau_dip_and_keeps_a_real_fall():
    """The twenty-fourth run's candidates (``drop_step_confirmed``): a training-reward dip that recovers within the
    hold, or a held-out evaluation back near its best at the next one, is no drop; a fall that stays is one, at the
    same step as the current drop."""
    import random

    rng = random.Random(7)
    for _ in range(500):  # hold 1 without confirmation is the current drop, to the letter
        n = rng.choice((12, 40, 60))
        reward, evals = [(s, rng.random()) for s in range(n)], [(s, rng.random()) for s in range(0, n, 5)]
        assert ew.drop_step_confirmed(reward, evals) == ew.drop_step(reward, evals)
    plateau = [(s, 0.6) for s in range(40)]
    dip = plateau[:20] + [(s, 0.1) for s in range(20, 22)] + plateau[22:]  # two bad steps: the mean dips 0.2
    assert ew.drop_step(dip, [])[0] == 21
    assert ew.drop_step_confirmed(dip, [], hold=5)[0] is None
    fall = plateau[:20] + [(s, 0.1) for s in range(20, 40)]
    assert ew.drop_step_confirmed(fall, [], hold=5) == (21, ew.drop_step_confirmed(fall, [], hold=5)[1])
    assert ew.drop_step_confirmed(fall, [], hold=5)[0] == ew.drop_step(fall, [])[0]
    # the run's end: a fall with 3 means left counts (all hold), with 2 left it cannot be confirmed
    assert ew.drop_step_confirmed(plateau[:35] + [(s, 0.0) for s in range(35, 40)], [], hold=5)[0] == 36
    assert ew.drop_step_confirmed(plateau[:37] + [(s, 0.0) for s in range(37, 40)], [], hold=5)[0] is None
    back = [(0, 0.3), (5, 0.6), (10, 0.4), (15, 0.6), (20, 0.3), (25, 0.3)]  # a dip at 10, a lasting fall at 20
    assert ew.drop_step(plateau, back)[0] == 10
    step, why = ew.drop_step_confirmed(plateau, back, confirm=True)
    assert step == 20 and "next 0.300" in why
    assert ew.drop_step_confirmed(plateau, back[:5], confirm=True)[0] is None  # the last evaluation: unconfirmed
    assert ew.drop_step_confirmed(fall, back, train_leg=False)[0] == 10  # held-out alone


def test_rescoring_chooses_on_calibration_and_counts_each_run_once(tmp_path):
    from bench import early_warning_rescore as rs

    run = {"name": "healthy-s0", "class": "healthy", "split": "calibration", "seed": 0,
           "reward": [0.6] * 20 + [0.1, 0.1] + [0.6] * 18, "evals": [[0, 0.3], [20, 0.6], [40, 0.6]]}
    sure = {"name": "lr-too-high-s0", "class": "lr-too-high", "split": "calibration", "seed": 0,
            "reward": [0.6] * 20 + [0.1] * 20, "evals": [[0, 0.3], [20, 0.6], [40, 0.2]]}
    import json
    for f in ("a", "b"):  # the same two runs in two results files (scored under two rule sets)
        (tmp_path / f"early_warning_{f}.json").write_text(json.dumps({"runs": [run, sure]}))
    runs = rs.load(sorted(tmp_path.glob("*.json")))
    assert [r["name"] for r in runs] == ["healthy-s0", "lr-too-high-s0"] and runs[0]["file"] == "early_warning_a"
    table = rs.drop_table(runs, "calibration")
    assert table["current"]["healthy_dropped"] == ["healthy-s0"]  # the plateau dip
    assert table["hold5"]["healthy_with_drop"] == 0 and table["hold5"]["sure_with_drop"] == 1
    assert table["hold5"]["median_delay"] == 0
    assert rs.choose(table) == "hold5"  # first in the registered order among those tied on every count


def test_judge_lists_the_whole_doctors_warnings_beside_the_precursors(tmp_path):
    """``judge`` replays the precursors step by step and, beside them, lists what the whole doctor (every rule)
    reports at warning or above on the finished record (``all_rules``): on a real lr collapse the precursor's
    warning is among them at the replay's step; on a real healthy run the list is empty."""
    import json

    import rlobs
    from rlobs.doctor.rules.precursors import OVERSIZED

    from bench.early_warning_live import emit_step

    data = json.loads((Path(__file__).with_name("data") / "collapse_runs.json").read_text())["runs"]

    def rebuilt(name: str) -> Path:
        rec = rlobs.init(tmp_path / name, component="trainer", rank=0, run_id=name, prometheus=False,
                         set_global=False, config={"mode": "sync"})
        for row in data[name]["steps"]:
            emit_step(rec, row, correction_cap=data[name].get("correction_cap"))
        rec.close()
        return tmp_path / name

    collapse = ew.judge(rebuilt("lr-too-high-s5"))
    assert collapse["first_warning"] == collapse["per_rule"][OVERSIZED] is not None
    assert {"rule": OVERSIZED, "severity": "warning", "step": collapse["first_warning"]} in [
        {k: a[k] for k in ("rule", "severity", "step")} for a in collapse["all_rules"]]
    healthy = ew.judge(rebuilt("healthy-s0"))
    assert healthy["first_warning"] is None and healthy["all_rules"] == []


def test_live_alerts_are_scored_as_the_doctor_is():
    """``early_warning_live.score``: an alert while stepping strictly before the drop detects the run (its lead:
    drop - alert step); one at the drop step does not; a healthy run, even one with a drop, and a mixed class's run
    without a drop count against the bar at any alert while stepping; the doctor's detections sit beside."""
    from bench.early_warning_live import score

    def row(name, cls, live, drop, doctor):
        return {"name": name, "class": cls, "live_first": live, "drop_step": drop, "doctor_first": doctor}

    s = score([row("a", "kl-blow-up", 10, 20, 7), row("b", "kl-blow-up", 20, 20, 12), row("c", "kl-blow-up", None, 30, None),
               row("d", "kl-blow-up", None, None, None), row("h1", "healthy", 5, 30, None),
               row("h2", "healthy", None, None, None), row("m", "staleness-no-is-lag4", 9, None, 8)])
    kl = s["kl-blow-up"]
    assert (kl["runs"], kl["collapsed"], kl["live_detected"], kl["doctor_detected"]) == (4, 3, 1, 2)
    assert kl["live_leads"] == [10] and kl["live_lag"] == [3, 8] and kl["healthy"] == 0
    assert s["healthy"]["healthy"] == 2 and s["healthy"]["healthy_alerted"] == ["h1"]
    assert s["staleness-no-is-lag4"]["healthy_alerted"] == ["m"] and s["staleness-no-is-lag4"]["collapsed"] == 0


def test_one_alert_counts_stray_pages_and_its_class_beside_its_doctor_rule():
    from bench.early_warning_live import one_alert

    A, R = "RlobsPrecursorRewardHacking", "precursor-reward-hacking"

    def row(name, cls, fired=(), after=(), doctor=None):
        return {"name": name, "class": cls, "fired": list(fired), "after_last_step": list(after),
                "first_step": {a: 7 for a in fired}, "doctor_per_rule": {R: doctor} if doctor is not None else {}}

    rows = [row("h1", "reward-hacking", [A], doctor=9), row("h2", "reward-hacking", [A], [A]),
            row("h3", "reward-hacking", doctor=12),
            row("lr1", "lr-too-high", [A]), row("lr2", "lr-too-high", [A], doctor=30),
            row("ok1", "healthy", [A], [A]), row("ok2", "healthy", ["RlobsPrecursorKlCreep"])]
    got = one_alert(rows, A, R, "reward-hacking")
    assert got["class_runs"] == ["h1", "h2", "h3"]
    assert got["fired_while_stepping"] == ["h1"]  # h2's came after its last step: not counted for the class
    assert got["doctor_warned"] == ["h1", "h3"]
    # lr2's page is the doctor's finding too (not stray); a page after the last step still counts as stray
    assert got["stray"] == [{"name": "lr1", "class": "lr-too-high", "step": 7, "after_last_step": False},
                            {"name": "ok1", "class": "healthy", "step": 7, "after_last_step": True}]


def test_the_replay_scales_each_rules_for_as_it_scales_the_windows():
    from bench.early_warning_live import SCALE, scaled_for

    assert SCALE == {"recent": "5s", "history": "30s"}  # 10 min -> 5 s, 1 h -> 30 s: 120 real seconds a second
    assert scaled_for("10m") == "5s" and scaled_for("1h") == "30s"
    assert scaled_for("1m") == "1s" and scaled_for("30s") == "1s"  # at least one rule evaluation
    with pytest.raises(ValueError, match="single duration"):
        scaled_for("1m30s")


def test_a_replay_at_another_pace_scales_the_committed_rules_or_the_ones_built_for_it(monkeypatch):
    """`--step-seconds 300`: a replayed second stands for 300 s, so the committed 10 min / 1 h hold 2 and 12 steps
    (2 s / 12 s) and `for` 10m is 2 s; `--rules-step-seconds 300` replays the rules built for that pace, whose
    windows hold 5 and 30 steps again: on the replay's clock the same as the committed rules at 120 s."""
    from bench import early_warning_live as live

    for name in ("SCALE", "REAL_SECONDS_PER_SECOND", "RULES_STEP_SECONDS"):  # set_pace's globals, restored after
        monkeypatch.setattr(live, name, getattr(live, name))
    live.set_pace(300)
    assert live.SCALE == {"recent": "2000ms", "history": "12000ms"} and live.for_seconds("10m") == 2
    assert live.gate_thresholds().no_progress_floor_seconds == pytest.approx(60 / 300)
    live.set_pace(300, 300)
    assert live.SCALE == {"recent": "5000ms", "history": "30000ms"}
    assert (live.for_seconds("10m"), live.for_seconds("1m")) == (5, 1)
    live.set_pace(30)
    assert live.SCALE == {"recent": "20000ms", "history": "120000ms"} and live.for_seconds("1m") == 2
    live.set_pace(120)
    assert live.SCALE == {"recent": "5000ms", "history": "30000ms"} and live.for_seconds("10m") == 5


def test_an_alert_pages_its_scaled_for_after_it_went_pending():
    from datetime import datetime, timezone

    from bench.early_warning_live import for_seconds, step_at

    times = [1000.0 + i for i in range(10)]  # one step a second
    pending = datetime.fromtimestamp(1003.5, tz=timezone.utc).isoformat().replace("+00:00", "Z")
    assert step_at(times, pending) == 3  # went pending after step 3 was emitted
    assert for_seconds("10m") == 5.0 and step_at(times, pending, for_seconds("10m")) == 8  # paged 5 s later
    assert step_at(times, pending, for_seconds("1m")) == 4


def test_a_real_paced_replay_keeps_each_runs_gaps_relative_to_its_yardstick():
    from bench.early_warning_live import PERIOD, gap_ratio, pace

    # a run at 2 s a step whose step 3 waited on an evaluation (8 s of wall time, 1.5 s of it step and data wait)
    walls = [0.0, 2.0, 4.0, 12.0, 14.0]
    steps = [{"step": i, "wall": w, "busy": 1.5} for i, w in enumerate(walls)]
    waits = pace(steps, real_timing=True)
    # the mean gap, 3.5 s, becomes one PERIOD; the last step waits a mean gap
    assert [w for w, _ in waits] == pytest.approx([2 / 3.5, 2 / 3.5, 8 / 3.5, 2 / 3.5, 1.0])
    assert sum(w for w, _ in waits[:-1]) / 4 == pytest.approx(PERIOD)
    assert all(b == pytest.approx(1.5 * PERIOD / 3.5) for _, b in waits)  # the step time, on the same clock
    # the gap/yardstick ratio survives the scaling: 8 s over 1.5 s in the run, 2.29 over 0.43 in the replay
    assert waits[2][0] / waits[2][1] == pytest.approx(8 / 1.5)
    assert gap_ratio(steps) == (pytest.approx(5.33, abs=0.01), 3)
    # a metronome without --real-timing, or for a record without timing
    assert pace(steps) == [(PERIOD, PERIOD)] * 5
    assert pace([{"step": 0}, {"step": 1}], real_timing=True) == [(PERIOD, PERIOD)] * 2
    assert gap_ratio([{"step": 0}, {"step": 1}]) is None


def test_a_held_value_alert_is_timed_from_the_last_step():
    from datetime import datetime, timezone

    from bench.early_warning_live import after_last_step, seconds_after_last_step

    times = [1000.0 + i for i in range(10)]
    late = datetime.fromtimestamp(1015.25, tz=timezone.utc).isoformat().replace("+00:00", "Z")
    assert after_last_step(times, late) and seconds_after_last_step(times, late) == pytest.approx(6.2, abs=0.06)
    early = datetime.fromtimestamp(1009.5, tz=timezone.utc).isoformat().replace("+00:00", "Z")
    assert not after_last_step(times, early) and seconds_after_last_step(times, early) == 0.5


def test_a_real_paced_replay_declares_the_runs_pauses_where_they_were():
    """``schedule``: with ``--real-timing`` each declared pause of the record (``run_signals``' ``pauses``) is entered
    (its heartbeat name) and left (its phase name and scaled seconds) at its own time on the replay's clock; the
    evaluation before the first step moves the replay later; without real timing pauses are not replayed."""
    from bench.early_warning_live import pace, schedule

    walls = [10.0, 12.0, 14.0, 22.0, 24.0]  # mean gap 3.5 s -> one PERIOD
    steps = [{"step": i, "wall": w, "busy": 1.5} for i, w in enumerate(walls)]
    pauses = [{"wall": 3.0, "seconds": 3.5, "phase": "evaluation"},  # before training
              {"wall": 15.0, "seconds": 7.0, "phase": "evaluation"},  # what step 3 waited for
              {"wall": 25.0, "seconds": 0.7, "phase": "checkpoint"}]  # after the last step
    run = {"steps": steps, "pauses": pauses}
    ev = schedule(run, real_timing=True)
    s = 1 / 3.5
    assert [(k, w if k != "step" else w[0]["step"]) for _, k, w in ev] == [
        ("enter", "eval"), ("exit", ("evaluation", pytest.approx(3.5 * s))), ("step", 0), ("step", 1), ("step", 2),
        ("enter", "eval"), ("exit", ("evaluation", pytest.approx(7 * s))), ("step", 3), ("step", 4),
        ("enter", "checkpoint"), ("exit", ("checkpoint", pytest.approx(0.7 * s)))]
    at = [o for o, _, _ in ev]
    assert at[0] == 0 and at[2] == pytest.approx(7 * s)  # the first evaluation began 7 s before step 0
    assert at[5] - at[4] == pytest.approx(1 * s) and at[6] - at[5] == pytest.approx(7 * s)  # 1 s after step 2, 7 s
    assert at[7] == pytest.approx(at[6])  # step 3 came as the evaluation ended
    assert [at[i + 1] - at[i] for i in (2, 3)] == pytest.approx([w for w, _ in pace(steps, True)[:2]])
    assert [k for _, k, _ in schedule(run)] == ["step"] * 5  # a metronome replays no pauses


def test_the_gate_report_reads_the_stalled_moments_against_the_steps_and_the_last_pause():
    from bench.early_warning_live import gate_report

    times = [100.0 + i for i in range(10)]
    g = gate_report(times, {"pause_ends": [104.5, 112.0], "stalled": [104.0, 115.25, 116.0]})
    assert g["last_progress"] == 112.0  # the final evaluation ended after the last step (109)
    assert g["while_stepping"] == [4.0] and g["after_last_step_s"] == 6.25
    assert gate_report(times, {"pause_ends": [], "stalled": []}) == {
        "last_progress": 109.0, "while_stepping": [], "after_last_step_s": None, "fresh_shut_while_stepping": None,
        "fresh_shut_before_step_5": None}  # the fresh-data gate not read (a replay of rules from before it)
    reads = [99.0 + k * 0.25 for k in range(80)]  # 99 .. 118.75: open throughout but 106.0-106.25
    got = gate_report(times, {"pause_ends": [], "stalled": [], "read_from": 99.0,
                              "fresh_open": [r for r in reads if not 106.0 <= r <= 106.25]})
    assert got["fresh_shut_while_stepping"] == [6.0, 6.25] and got["fresh_shut_before_step_5"] == []


def test_run_signals_reads_a_records_declared_pauses(tmp_path):
    """``run_signals`` hands the replay each declared pause of a real record (probes' phase timer: the held-out
    evaluation, the checkpoint save; not the generation or sync phases), when it began and how long it took."""
    import time

    import rlobs
    from probes.liveness import Liveness

    from bench.early_warning_live import emit_step

    rec = rlobs.init(tmp_path / "r", component="trainer", rank=0, run_id="r", prometheus=False, set_global=False,
                     config={"mode": "sync"})
    live = Liveness(rec)
    with live.phase("eval"):
        time.sleep(0.05)
    for i in range(3):
        emit_step(rec, {"step": i, "reward": 0.2, "grad_norm": 1.0, "entropy": 1.0})
        with live.phase("sync"):
            pass
    began = time.time()
    with live.phase("checkpoint"):
        time.sleep(0.02)
    rec.close()
    sig = ew.run_signals(tmp_path / "r")
    assert [p["phase"] for p in sig["pauses"]] == ["evaluation", "checkpoint"]
    assert sig["pauses"][0]["seconds"] >= 0.05 and sig["pauses"][1]["seconds"] >= 0.02
    assert sig["pauses"][0]["wall"] < sig["steps"][0]["wall"] and abs(sig["pauses"][1]["wall"] - began) < 0.01


def test_progress_gaps_count_a_declared_pause_as_progress_and_flag_one_over_its_allowance():
    """bench/progress_gaps.py: the longest span without progress after step 5, in mean steps, with time inside a
    declared pause counted as progress (the spans a fresh-data gate on the precursor alerts must outlast), and the
    pauses after step 5 longer than the no-progress alert's allowance (5x the mean earlier pause, at least its floor,
    here 5 mean steps)."""
    from bench import progress_gaps as pg

    walls = [float(i) for i in range(10)] + [20.0 + i for i in range(10)]  # 20 steps, a 11-s gap after step 9
    steps = [{"step": i, "wall": w} for i, w in enumerate(walls)]
    mean = (walls[-1] - walls[0]) / 19
    bare = pg.longest_span({"steps": steps})
    assert bare["at_step"] == 10 and bare["span_mean_steps"] == round(11 / mean, 2)
    # the gap was an evaluation from 9.5 to 19.5: the longest span is now the 1 s after it (or a plain step)
    pauses = [{"wall": 2.5, "seconds": 0.5, "phase": "evaluation"}, {"wall": 9.5, "seconds": 10.0, "phase": "evaluation"}]
    got = pg.longest_span({"steps": steps, "pauses": pauses})
    assert got["span_mean_steps"] == round(1 / mean, 2)
    assert got["pauses_over_allowance"] == [round(10 / mean, 2)]  # 20x the earlier pause and over 5 mean steps
    short = pg.longest_span({"steps": steps, "pauses": [{"wall": 9.5, "seconds": 2.0, "phase": "evaluation"}, *pauses[:1]]})
    assert short["pauses_over_allowance"] == []


def test_fresh_shut_lists_the_reads_without_the_gate_between_step_5_and_the_last_step():
    """bench/early_warning_live.py's read-back of the fresh-data gate: Prometheus returns the read times (every
    GATE_READ_S from the replay's start) at which the gate was open; the reads missing between the emission of a run's
    step 5 and of its last step are where the gated alerts could differ from the alerts without the gate."""
    from bench.early_warning_live import GATE_READ_S, fresh_shut

    t0 = 1000.0
    times = [t0 + 0.5 + i for i in range(10)]  # steps 0-9 emitted at 0.5, 1.5, ... 9.5 s after the replay began
    reads = [t0 + k * GATE_READ_S for k in range(60)]  # 0 .. 14.75 s
    assert fresh_shut(times, reads, t0) == []
    shut = [r for r in reads if 7.0 <= r - t0 < 7.5]  # shut at 7.0 and 7.25, between steps 6 and 7
    got = fresh_shut(times, [r for r in reads if r not in shut], t0)
    assert got == [round(r - times[0], 2) for r in shut] == [6.5, 6.75]
    # shut before step 5 (emitted at 5.5 s) or after the last step (9.5 s) is not while stepping
    outside = [r for r in reads if r - t0 < 5.5 or r - t0 > 9.5]
    assert fresh_shut(times, [r for r in reads if r not in outside], t0) == []
    assert fresh_shut(times[:5], [], t0) == []  # a run that never reached step 5
