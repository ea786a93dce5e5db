"""Advantage-denominator health: GRPO's per-group (r - mean) / (std + eps), and the loss denominator.

Per step (DESIGN.md §2.2):
- share of groups whose rewards are all equal (std == 0: no learning signal), and of groups with
  0 < std < ``near_zero_threshold`` (the denominator is tiny, so a reward difference at the level of
  numerical noise becomes a full +-1 advantage, or, once eps dominates, is amplified by 1/eps);
- max |advantage|, the per-group denominators' min / median / max, and how many are NaN, Inf or 0;
- for token-level / global loss normalisation: the token count this data-parallel rank divided its
  loss by, every rank's value (an all-gather when ``torch.distributed`` is initialised), and whether
  they all agree. All ranks must call ``observe`` with a token denominator at the same step (it is a
  collective).

Defaults: ``eps = 1e-6``; ``ddof = 1`` (the unbiased std of ``torch.std``, which TRL and verl use);
``near_zero_threshold = 1e-3``: rewards usually live in [0, 1] and binary rewards in a group of n <= 64
have std >= ~0.12 unless all equal, so a std below 1e-3 means the group's rewards differ only at
noise level; change it for reward scales far from 1.

    probe = AdvantageProbe()
    health = probe.observe(rewards_by_group, token_denominator=float(mask.sum()))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from probes._common import Recorderish, dumps, is_tensor, recorder_or_global, to_numpy, warn_limited

DEFAULT_EPS = 1e-6
DEFAULT_NEAR_ZERO = 1e-3


def _groups(rewards: Any) -> list[np.ndarray]:
    """Rewards per group from a 2-D array/tensor (G, n), a list of sequences or a {group: rewards} map."""
    if isinstance(rewards, Mapping):
        rewards = list(rewards.values())
    if is_tensor(rewards) or isinstance(rewards, np.ndarray):
        arr = to_numpy(rewards)
        if arr.ndim == 1:
            return [arr]
        return [row for row in arr.reshape(arr.shape[0], -1)]
    return [to_numpy(g).reshape(-1) for g in rewards]


def group_std(rewards: np.ndarray, ddof: int = 1) -> float:
    """Std of one group's rewards; 0.0 exactly when all are equal; NaN when too few samples."""
    n = rewards.size
    if n - ddof <= 0:
        return math.nan
    if n and bool(np.all(rewards == rewards[0])):
        return 0.0
    return float(np.std(rewards, ddof=ddof))


def _rectangular(groups: list[np.ndarray]) -> np.ndarray | None:
    if not groups:
        return None
    n = groups[0].size
    if any(g.size != n for g in groups):
        return None
    return np.stack(groups) if len(groups) > 1 else groups[0].reshape(1, -1)


def _rect_std(arr: np.ndarray, ddof: int) -> np.ndarray:
    """Per-row ``group_std`` of a (G, n) array."""
    g, n = arr.shape
    if n - ddof <= 0:
        return np.full(g, math.nan)
    std = np.std(arr, axis=1, ddof=ddof)
    std[np.all(arr == arr[:, :1], axis=1)] = 0.0
    return std


def grpo_advantages(rewards: Any, *, eps: float = DEFAULT_EPS, ddof: int = 1) -> tuple[list[np.ndarray], np.ndarray]:
    """Reference GRPO advantages: per group (r - mean) / (std + eps). Returns (advantages per group,
    denominators)."""
    advs, denoms = [], []
    for g in _groups(rewards):
        std = group_std(g, ddof)
        d = std + eps
        advs.append((g - g.mean()) / d if g.size else g)
        denoms.append(d)
    return advs, np.asarray(denoms, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class AdvantageHealth:
    """One step's advantage-denominator health on this rank."""

    groups: int
    zero_std_groups: int
    near_zero_std_groups: int
    near_zero_threshold: float
    max_abs_advantage: float
    denom_min: float
    denom_p50: float
    denom_max: float
    nonfinite_denominators: int
    token_denominator: float | None = None
    rank_denominators: tuple[float, ...] | None = None

    @property
    def zero_std_ratio(self) -> float:
        return self.zero_std_groups / self.groups if self.groups else math.nan

    @property
    def near_zero_std_ratio(self) -> float:
        return self.near_zero_std_groups / self.groups if self.groups else math.nan

    @property
    def ranks_agree(self) -> bool | None:
        if self.rank_denominators is None:
            return None
        first = self.rank_denominators[0]
        return all(d == first or (math.isnan(d) and math.isnan(first)) for d in self.rank_denominators)

    def fields(self) -> dict[str, Any]:
        """The ``advantage`` event fields."""
        return {
            "groups": self.groups, "zero_std_groups": self.zero_std_groups,
            "near_zero_std_groups": self.near_zero_std_groups, "near_zero_threshold": self.near_zero_threshold,
            "zero_std_ratio": self.zero_std_ratio, "near_zero_std_ratio": self.near_zero_std_ratio,
            "max_abs_advantage": self.max_abs_advantage, "denom_min": self.denom_min, "denom_p50": self.denom_p50,
            "denom_max": self.denom_max, "nonfinite_denominators": self.nonfinite_denominators,
            "token_denominator": self.token_denominator, "ranks_agree": self.ranks_agree,
            "rank_denominators": None if self.rank_denominators is None else dumps(list(self.rank_denominators)),
        }


def advantage_health(rewards: Any, *, advantages: Any = None, denominators: Any = None, eps: float = DEFAULT_EPS,
                     ddof: int = 1, near_zero_threshold: float = DEFAULT_NEAR_ZERO) -> AdvantageHealth:
    """Measure a batch of grouped rewards.

    advantages: the advantages the trainer actually used (any shape); by default the reference GRPO
        ones are computed from ``rewards``.
    denominators: the per-group denominators the trainer used; by default std + eps.
    """
    rect: np.ndarray | None
    if (is_tensor(rewards) or isinstance(rewards, np.ndarray)) and len(getattr(rewards, "shape", ())) == 2:
        rect = to_numpy(rewards)
        groups = list(rect)
    else:
        groups = _groups(rewards)
        rect = _rectangular(groups)
    if rect is not None:  # one vectorised pass for equal-sized groups (the common case)
        stds = _rect_std(rect, ddof)
    else:
        stds = np.asarray([group_std(g, ddof) for g in groups], dtype=np.float64)
    zero = int(np.sum(stds == 0.0))
    near = int(np.sum((stds > 0.0) & (stds < near_zero_threshold)))
    if denominators is None:
        denoms = stds + eps
    else:
        denoms = to_numpy(denominators).reshape(-1)
    if advantages is None:
        with np.errstate(divide="ignore", invalid="ignore"):
            if rect is not None and rect.shape[1] and denoms.size == rect.shape[0]:
                advantages = ((rect - rect.mean(axis=1, keepdims=True)) / denoms[:, None]).reshape(-1)
            else:
                advantages = [(g - g.mean()) / d for g, d in zip(groups, denoms) if g.size]
    if isinstance(advantages, (list, tuple)):
        flat = np.concatenate([to_numpy(a).reshape(-1) for a in advantages]) if advantages else np.zeros(0)
    else:
        flat = to_numpy(advantages).reshape(-1)
    finite = denoms[np.isfinite(denoms)]
    bad = int(np.sum(~np.isfinite(denoms)) + np.sum(denoms == 0.0))
    not_nan = flat[~np.isnan(flat)]  # NaN advantages show up as nonfinite denominators
    max_abs = float(np.max(np.abs(not_nan))) if not_nan.size else math.nan
    return AdvantageHealth(
        groups=len(groups), zero_std_groups=zero, near_zero_std_groups=near,
        near_zero_threshold=float(near_zero_threshold), max_abs_advantage=max_abs,
        denom_min=float(finite.min()) if finite.size else math.nan,
        denom_p50=float(np.median(finite)) if finite.size else math.nan,
        denom_max=float(finite.max()) if finite.size else math.nan,
        nonfinite_denominators=bad,
    )


def gather_denominators(value: float, group: Any = None) -> list[float]:
    """Every data-parallel rank's value (rank order), via ``torch.distributed.all_gather`` of a float64
    tensor when a process group is initialised; ``[value]`` otherwise. A collective: all ranks call it."""
    try:
        import torch.distributed as dist
    except ImportError:
        return [float(value)]
    if not (dist.is_available() and dist.is_initialized()):
        return [float(value)]
    import torch

    backend = dist.get_backend(group)
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    world = dist.get_world_size(group)
    mine = torch.tensor([float(value)], dtype=torch.float64, device=device)
    out = [torch.empty(1, dtype=torch.float64, device=device) for _ in range(world)]
    dist.all_gather(out, mine, group=group)
    return [float(t.item()) for t in out]


class AdvantageProbe:
    """Emits one ``advantage`` event per step and rank.

    eps, ddof, near_zero_threshold: as in ``advantage_health``.
    process_group: the data-parallel group for the denominator all-gather (default: the world).
    """

    def __init__(self, recorder: Recorderish | None = None, *, eps: float = DEFAULT_EPS, ddof: int = 1,
                 near_zero_threshold: float = DEFAULT_NEAR_ZERO, process_group: Any = None):
        self._recorder = recorder
        self.eps = eps
        self.ddof = ddof
        self.near_zero_threshold = near_zero_threshold
        self.process_group = process_group

    def observe(self, rewards: Any, *, advantages: Any = None, denominators: Any = None,
                token_denominator: float | None = None, gather: bool = True,
                step: int | None = None) -> AdvantageHealth:
        """Measure and emit. ``token_denominator``: the global token count this rank divides its loss by
        (when given and ``gather``, every rank's value is all-gathered: call on all ranks)."""
        try:
            h = advantage_health(rewards, advantages=advantages, denominators=denominators, eps=self.eps,
                                 ddof=self.ddof, near_zero_threshold=self.near_zero_threshold)
        except Exception as exc:  # bad input is reported, never raised into training
            warn_limited("advantage", "advantage probe: batch not measured: %s: %s", type(exc).__name__, exc)
            h = AdvantageHealth(0, 0, 0, float(self.near_zero_threshold), math.nan, math.nan, math.nan, math.nan, 0)
        if token_denominator is not None:
            td = float(token_denominator.item() if hasattr(token_denominator, "item") else token_denominator)
            ranks = tuple(gather_denominators(td, self.process_group)) if gather else (td,)
            h = AdvantageHealth(**{**{f: getattr(h, f) for f in h.__dataclass_fields__},
                                   "token_denominator": td, "rank_denominators": ranks})
        fields = h.fields()
        if step is not None:
            fields["step"] = step
        recorder_or_global(self._recorder).emit("advantage", **fields)
        return h


def summarize_ranks(values: Sequence[float]) -> dict[str, Any]:
    """{'agree': bool, 'min': x, 'max': y, 'values': [...]} for a list of per-rank denominators."""
    vals = [float(v) for v in values]
    return {"agree": len(set(vals)) <= 1, "min": min(vals) if vals else math.nan,
            "max": max(vals) if vals else math.nan, "values": vals}
