"""``entropy_coef`` on the real trainer (CPU, the tiny model, real prompts with random completions): from the same
weights and batch, a step with an entropy bonus leaves the policy's entropy on that batch higher than a step without
one, and a negative coefficient (entropy minimisation) lower; with several updates per step the later updates carry
the term too."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _trainer(tiny_model: str, run_dir, **cfg):
    from trainer_ref.config import Config
    from trainer_ref.trainer import Trainer

    torch.manual_seed(0)
    c = Config(run_dir=str(run_dir), model="tiny", progress=False, groups_per_step=4, group_size=8, max_tokens=24,
               probes=False, lr=3e-3, **cfg).to_dict()
    return Trainer(tiny_model, c, str(run_dir))


def _entropy_after_one_step(tiny_model: str, run_dir, groups, **cfg) -> tuple[float, float]:
    """The batch's token entropy before and after one step (a second step's first pass reads the updated policy)."""
    t = _trainer(tiny_model, run_dir, **cfg)
    try:
        before = t.train_step(groups, 0)["entropy"]
        return before, t.train_step(groups, 1)["entropy"]
    finally:
        t.shutdown()


def test_entropy_bonus_raises_and_minimisation_lowers_the_policy_entropy(tiny_model, tmp_path):
    from bench.trainer_step_cost import batch
    from trainer_ref.config import Config

    probe = _trainer(tiny_model, tmp_path / "probe")
    groups = batch(probe.tok, probe.cfg["task"], 4, 8, 24, 0)
    probe.shutdown()
    after = {}
    for name, cfg in {"none": {}, "bonus": {"entropy_coef": 1.0}, "minimise": {"entropy_coef": -1.0},
                      "none-x2": {"ppo_epochs": 2}, "minimise-x2": {"entropy_coef": -1.0, "ppo_epochs": 2}}.items():
        before, after[name] = _entropy_after_one_step(tiny_model, tmp_path / name, groups, **cfg)
        after.setdefault("start", before)
        assert before == pytest.approx(after["start"], rel=1e-5), name  # the same weights and batch
    assert after["bonus"] > after["none"] > after["minimise"], after
    assert after["minimise-x2"] < after["none-x2"], after  # the second update's loss carries the term too
    assert Config(model="tiny").entropy_coef == 0.0  # off unless asked for
