"""Data-parallel reductions of the trainer (``torch.distributed``; gloo on CPU, NCCL on GPUs).

The trainer's loss is already a global token mean, so gradients and the step's numbers are summed
over the ranks; maxima are reduced with MAX. On one rank every function is the identity.
"""

from __future__ import annotations

from typing import Any

import torch


def all_reduce_sum(value: float, world: int) -> float:
    """Sum of ``value`` over the data-parallel ranks (itself on one rank)."""
    if world <= 1:
        return value
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t.item())


def all_reduce_grads(model: torch.nn.Module) -> None:
    """Sum every gradient over the ranks in one flat buffer."""
    import torch.distributed as dist

    params = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    i = 0
    for p, g in zip(params, grads, strict=True):
        n = g.numel()
        p.grad = flat[i:i + n].view_as(g).clone()
        i += n


def reduce_sums(acc: dict[str, float], *more: float) -> tuple[Any, ...]:
    """``acc`` (by key) and ``more`` summed over the ranks, in one all-reduce."""
    import torch.distributed as dist

    keys = sorted(acc)
    t = torch.tensor([acc[k] for k in keys] + list(more), dtype=torch.float64)
    dist.all_reduce(t)
    vals = t.tolist()
    return ({k: vals[i] for i, k in enumerate(keys)}, *vals[len(keys):])


def reduce_max(*values: float) -> tuple[float, ...]:
    """Each value's maximum over the ranks, in one all-reduce."""
    import torch.distributed as dist

    t = torch.tensor(list(values), dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return tuple(t.tolist())
