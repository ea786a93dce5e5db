"""`--step-seconds-from RUN`: the precursor alerts built for the step time measured in a run's record."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

import rlobs
import rlobs.recorder as recorder_mod
from rlobs import exitcodes
from rlobs.cli import app
from rlobs.dashboards.pace import PaceError, measured_step_seconds


def _record(run_dir, gaps_s: list[float], monkeypatch) -> None:
    """A real record whose trainer stepped ``gaps_s`` apart (the recorder's wall clock stepped by the test)."""
    clock = {"ns": 1_700_000_000 * 10**9}
    monkeypatch.setattr(recorder_mod, "_time_ns", lambda: clock["ns"])
    rec = rlobs.init(run_dir, component="trainer", rank=0, set_global=False, flush_interval=0.05)
    for i, gap in enumerate([0.0, *gaps_s]):
        clock["ns"] += int(gap * 1e9)
        rec.set_step(i)
        rec.emit("train_step", loss=0.1, grad_norm=1.0, reward_mean=0.5, step_seconds=gap)
    rec.close()


def test_the_median_gap_between_steps_is_the_step_time_and_builds_the_rules(tmp_path, monkeypatch):
    # 300 s a step, and one 40-minute held-out evaluation between two steps: the median ignores it
    _record(tmp_path / "run", [300.0] * 5 + [2400.0] + [300.0] * 6, monkeypatch)
    monkeypatch.undo()
    assert measured_step_seconds([tmp_path / "run"]) == 300.0
    res = CliRunner().invoke(app, ["dashboards", "build", "--out", str(tmp_path / "out"),
                                   "--step-seconds-from", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert "a median of 300.0 s between optimiser steps" in res.output
    rules = {r["alert"]: r for r in yaml.safe_load((tmp_path / "out" / "alerts.yaml").read_text())["groups"][0]["rules"]}
    assert "[25m]" in rules["RlobsPrecursorOversizedUpdates"]["expr"] and rules["RlobsPrecursorGradNormDrift"]["for"] == "150s"


def test_a_record_without_two_steps_is_an_input_error_and_both_options_a_usage_error(tmp_path, monkeypatch):
    _record(tmp_path / "one-step", [], monkeypatch)
    monkeypatch.undo()
    try:
        measured_step_seconds([tmp_path / "one-step"])
    except PaceError as exc:
        assert "no two optimiser steps" in str(exc)
    else:
        raise AssertionError("a record with one step has no step time")
    runner = CliRunner()
    res = runner.invoke(app, ["dashboards", "build", "--out", str(tmp_path / "out"),
                              "--step-seconds-from", str(tmp_path / "one-step")])
    assert res.exit_code == exitcodes.INPUT and "--step-seconds instead" in res.output
    res = runner.invoke(app, ["dashboards", "build", "--out", str(tmp_path / "out"), "--step-seconds", "300",
                              "--step-seconds-from", str(tmp_path / "one-step")])
    assert res.exit_code == exitcodes.USAGE and "not both" in res.output
    res = runner.invoke(app, ["dashboards", "build", "--out", str(tmp_path / "out"),
                              "--step-seconds-from", str(tmp_path / "missing")])
    assert res.exit_code == exitcodes.INPUT and "not a readable run record" in res.output
    assert not (tmp_path / "out").exists()
