"""``ppo_epochs``: several optimiser updates per step over the same batch (verl's ppo_epochs), on the real trainer
(CPU, the tiny model, real prompts with random completions): the later updates take the step's first-pass
log-probs as the proximal policy, so the ratio clip acts from the second update on; the step still reports its
first pass and advances the policy version by one, and its policy_kl is one update's; and it moves the policy
further than one update does."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _trainer(tiny_model: str, run_dir, **cfg):
    from trainer_ref.config import Config
    from trainer_ref.trainer import Trainer

    torch.manual_seed(0)
    c = Config(run_dir=str(run_dir), model="tiny", progress=False, groups_per_step=4, group_size=8, max_tokens=24,
               probes=False, **cfg).to_dict()
    return Trainer(tiny_model, c, str(run_dir))


def test_later_updates_use_the_first_pass_as_proximal_policy_and_move_the_policy_further(tiny_model, tmp_path,
                                                                                         monkeypatch):
    from bench.trainer_step_cost import batch
    from trainer_ref import grpo

    one = _trainer(tiny_model, tmp_path / "one", lr=3e-3)
    three = _trainer(tiny_model, tmp_path / "three", lr=3e-3, ppo_epochs=3)
    start = {k: v.detach().clone() for k, v in three.model.state_dict().items()}
    assert all(torch.equal(start[k], v) for k, v in one.model.state_dict().items())  # the same initial weights
    groups = batch(one.tok, one.cfg["task"], 4, 8, 24, 0)

    calls: list[dict] = []
    real = grpo.grpo_loss

    def spy(logp, old_logp, *args, **kw):  # the real loss, its proximal log-probs and clip rate recorded
        parts = real(logp, old_logp, *args, **kw)
        mask, eps = args[2].bool(), kw["clip_eps"]
        ratio = (logp.detach() - old_logp).exp()[mask]
        calls.append({"old": old_logp, "moved": float((ratio - 1).abs().max()),
                      "outside": float(((ratio < 1 - eps) | (ratio > 1 + eps)).float().mean())})
        return parts

    monkeypatch.setattr(grpo, "grpo_loss", spy)
    o1 = one.train_step(groups, 0)
    n1 = len(calls)
    o3 = three.train_step(groups, 0)
    later = calls[n1:]
    assert n1 >= 1 and len(later) == 3 * n1  # every micro-batch, once per update
    first, rest = later[:n1], later[n1:]
    # the later updates' proximal log-probs are the first pass's own tensors, not a fresh forward's
    assert all(r["old"] is first[i % n1]["old"] for i, r in enumerate(rest))
    assert all(c["moved"] == 0.0 for c in first)  # first pass: on the proximal policy itself, ratio 1
    assert max(c["moved"] for c in rest) > 0.2 and max(c["outside"] for c in rest) > 0  # the clip has work to do
    # one version per step; the step reports its first pass (the same numbers as the one-update trainer's)
    assert one.version == three.version == 1
    for k in ("loss", "grad_norm", "entropy", "mean_abs_dlogp", "ess_ratio"):
        assert o3[k] == pytest.approx(o1[k], rel=1e-5), k
    # policy_kl is one update's size (the first, measured before the later updates), as the oversized-updates bars
    # are set: the same as the one-update trainer's step, not the three updates' together
    assert o1["policy_kl"] is not None and o1["policy_kl"] > 0
    assert o3["policy_kl"] == pytest.approx(o1["policy_kl"], rel=1e-4)
    # and the three updates moved the policy further than one
    d1 = sum(float((v - start[k]).norm()) for k, v in one.model.state_dict().items())
    d3 = sum(float((v - start[k]).norm()) for k, v in three.model.state_dict().items())
    assert d3 > 1.5 * d1, (d1, d3)
    one.shutdown()
    three.shutdown()


def test_ppo_epochs_below_one_is_refused():
    from trainer_ref.config import Config

    with pytest.raises(ValueError, match="ppo_epochs"):
        Config(model="tiny", ppo_epochs=0)
