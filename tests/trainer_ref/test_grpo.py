"""GRPO objective against hand-computed values."""

from __future__ import annotations

import math

import torch

from trainer_ref import grpo


def test_group_advantages_exact():
    advs, st = grpo.group_advantages([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5], [0.0, 0.001]], eps=1e-4)
    a = 0.5 / (0.5 + 1e-4)
    assert advs[0] == [a, -a, -a, a]
    assert advs[1] == [0.0, 0.0]
    assert st.groups == 3 and st.zero_std_groups == 1 and st.near_zero_std_groups == 1
    assert math.isclose(advs[2][1], 0.0005 / (0.0005 + 1e-4))
    assert math.isclose(st.denom_min, 1e-4) and math.isclose(st.denom_max, 0.5 + 1e-4)


def test_pad_batch_mask_aligns_with_targets():
    ids, mask = grpo.pad_batch([[5, 6, 7, 8], [5, 9]], [2, 1], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8], [5, 9, 0, 0]]
    # row 0: completion tokens 7, 8 are predicted at positions 1, 2
    assert mask.tolist() == [[0, 1, 1], [1, 0, 0]]


def test_loss_token_level_normalisation_and_tis():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]], requires_grad=True)
    old = logp.detach()
    gen = torch.tensor([[-1.0, -3.0], [-0.5, 0.0]])  # token (0,1): exp(-2 - -3) = e > cap 2
    adv = torch.tensor([1.0, -2.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    parts = grpo.grpo_loss(logp, old, gen, adv, mask, token_denominator=3.0, tis_cap=2.0)
    # ratio = 1 -> per-token loss = -w * A ; w = [1, 2 (capped)], [1]
    expected = (-(1 * 1.0) - (2 * 1.0) - (1 * -2.0)) / 3.0
    assert math.isclose(float(parts.loss.detach()), expected, rel_tol=1e-6)
    parts.loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-1 / 3, -2 / 3], [2 / 3, 0.0]]))
    assert parts.is_clipped == 1.0 and math.isclose(parts.is_ratio_max, math.e, rel_tol=1e-6)


def test_kl_k3_is_zero_at_reference():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    parts = grpo.grpo_loss(logp, logp.detach(), logp.detach(), torch.tensor([0.0]), torch.ones(1, 2), 2.0,
                           ref_logp=logp.detach().clone(), kl_coef=0.1)
    assert float(parts.loss.detach()) == 0.0 and parts.kl == 0.0
