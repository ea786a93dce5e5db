"""How bench/early_warning.py scores a run: the drop definitions and the per-class summary."""

from __future__ import annotations

import sys
from pathlib import Path

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
