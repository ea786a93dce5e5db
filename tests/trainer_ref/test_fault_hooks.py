"""Fault hooks that need no actors: what they do to real torch tensors."""

from __future__ import annotations

import math

import pytest
import torch

from trainer_ref import faults


def _grads(norm: float) -> list[torch.nn.Parameter]:
    a, b = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(4))
    a.grad, b.grad = torch.tensor([3.0, 0.0, 0.0]), torch.tensor([0.0, 4.0, 0.0, 0.0])  # joint norm 5
    for p in (a, b):
        p.grad.mul_(norm / 5.0)
    return [a, b]


def _norm(params: list[torch.nn.Parameter]) -> float:
    return math.sqrt(sum(float((p.grad ** 2).sum()) for p in params))


def test_grad_spike_is_a_multiple_of_the_recent_median_not_of_its_own_step():
    f = faults.Fault("grad_spike", 6, 50.0)
    params = _grads(0.2)  # this step's own norm is small; the run's recent steps were ~2
    faults.spike_grads(f, 6, params, [1.0, 2.0, 3.0, 0.0, float("nan")])  # no-gradient / NaN steps are no yardstick
    assert _norm(params) == pytest.approx(50.0 * 2.0, rel=1e-5)


def test_grad_spike_touches_only_its_onset_step_and_leaves_a_zero_gradient_alone():
    f = faults.Fault("grad_spike", 6, 50.0)
    params = _grads(0.2)
    faults.spike_grads(f, 5, params, [2.0])
    assert _norm(params) == pytest.approx(0.2, rel=1e-5)
    zero = _grads(0.0)
    faults.spike_grads(f, 6, zero, [2.0])
    assert _norm(zero) == 0.0
    first = _grads(0.5)  # no history yet: a multiple of its own norm
    faults.spike_grads(f, 6, first, [])
    assert _norm(first) == pytest.approx(25.0, rel=1e-5)

