"""The scenario of issue #15: a 200-step fully-async verl GRPO run with four problems planted (reward/grading
time dominating a stretch while the trainer idles, one advantage-denominator spike, the rollout-vs-trainer
probability difference jumping after a weight update and staying high, trajectory staleness growing past the
bound). Before the issue the doctor found 1 of 4; through verl's JSONL and through TensorBoard it must find
all four, each at its onset."""

from __future__ import annotations

import pytest

import rlobs
from bench import peer_corpus as pc
from rlobs.doctor import diagnose
from rlobs.importers import import_run

STEPS = 200
PLANTED = {"grading-dominates-step": 30, "advantage-denominator-collapse": 80, "parity-prob-drift": 120,
           "staleness-over-bound": 160}


def _series() -> list[dict[str, float]]:
    rows = pc.healthy(7, steps=STEPS)
    pc.plant(rows, "grading_slow", 20.0, 30)
    for r in rows[30 + 15:]:  # the grader recovers after 15 steps
        r["t_reward"] /= 20.0
        r["t_step"] = r["t_gen"] + r["t_reward"] + r["t_update"] + 2.0
    for r in rows[30 - 1:30 + 15]:
        r["idle"] = min(1.0, r["idle"] + 0.5)  # ... while the trainer idles
    pc.plant(rows, "adv_spike", 30.0, 80)
    pc.plant(rows, "parity_jump", 6.0, 120)
    pc.plant(rows, "staleness", 6.0, 160)
    return rows


@pytest.mark.parametrize("fmt", ["jsonl", "tensorboard"])
def test_all_four_planted_problems_are_found_at_their_onsets(tmp_path, fmt):
    source, path = pc.write_run("verl", _series(), tmp_path / "src", fmt)
    import_run(source, path, tmp_path / "run")
    with rlobs.open_run(tmp_path / "run") as rec:
        report = diagnose(rec)
    found = {f.rule: f.first_step for f in report.findings}
    for rule, onset in PLANTED.items():
        assert rule in found, (rule, [(f.rule, f.first_step) for f in report.findings])
        assert onset <= found[rule] <= onset + 10, (rule, found[rule])
    spike = [f for f in report.findings if f.rule == "grad-norm-spike"]
    adv = [f for f in report.findings if f.rule == "advantage-denominator-collapse"]
    if spike:  # the grad-norm spike the denominator caused ranks below it
        assert report.findings.index(adv[0]) < report.findings.index(spike[0])
