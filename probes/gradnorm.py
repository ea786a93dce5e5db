"""Grad norm: pre-clip global norm, non-finite detection, robust online spike detection, attribution.

Call after ``backward()`` and before ``optimizer.step()`` / ``zero_grad()``. Cheapest: pass the
pre-clip norm ``clip_grad_norm_`` already returns (no second pass over the gradients); per-group norms
are then computed only at a spike, from the gradients as they are at that moment (after clipping they
are all scaled by the same factor, so their proportions still attribute the spike):

    probe = GradNormProbe(max_norm=1.0)
    r = probe.observe(parameters=model.parameters(), groups=optimizer, sample_ids=ids, group_ids=gids,
                      loss=loss.item(), lr=lr)            # emits one ``train_step`` event
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

or ``probe.observe(grad_norm=torch.nn.utils.clip_grad_norm_(params, 1.0), groups=optimizer, ...)``.

Spike detector (``SpikeDetector``): ``rlobs.detect.SpikeDetector``, the one detector the doctor, the app
and the alert also use (so they agree on every step): on log(grad norm), a rolling window of the last
``window`` positive finite values; robust z = (log x - median) / max(1.4826 * MAD, ``min_sigma``); a spike
is z > ``threshold`` and x >= ``min_ratio`` x the median, once ``warmup`` values have been seen (defaults
in ``rlobs.detect.SPIKE``, chosen on the doctor's calibration runs). A step without gradient (norm 0) is
never part of the baseline; NaN/Inf never enter it.

At a spike or a non-finite norm, ``detail`` (JSON) holds the per-parameter-group norms, the running
median, and the sample and group ids of the batch, so the doctor can attribute it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from probes._common import Recorderish, as_list, dumps, recorder_or_global, warn_limited
from rlobs.detect import SpikeDetector  # re-exported: probes.SpikeDetector
from rlobs.schema import KINDS


def global_grad_norm(parameters: Iterable[Any], norm_type: float = 2.0) -> float:
    """The global gradient norm over ``parameters`` (NaN/Inf propagate), like ``clip_grad_norm_``."""
    import torch

    grads = [p.grad.detach() for p in parameters if getattr(p, "grad", None) is not None]
    if not grads:
        return 0.0
    total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6: foreach kernels
    if total_norm is not None:
        return float(total_norm(grads, norm_type))
    norms = torch.stack([torch.linalg.vector_norm(g.float(), norm_type).to(grads[0].device) for g in grads])
    return float(torch.linalg.vector_norm(norms, norm_type).item())


def _named_groups(groups: Any) -> dict[str, list[Any]]:
    """{name: [params]} from an optimizer (param_groups, named by their "name" key or index), an
    nn.Module (its top-level children), or a mapping name -> params."""
    if hasattr(groups, "param_groups"):
        return {str(g.get("name", f"group{i}")): list(g["params"]) for i, g in enumerate(groups.param_groups)}
    if hasattr(groups, "named_children"):
        out = {name: list(mod.parameters()) for name, mod in groups.named_children()}
        direct = [p for _, p in groups.named_parameters(recurse=False)]
        if direct:
            out["_self"] = direct
        return out
    if isinstance(groups, Mapping):
        return {str(k): list(v) if not hasattr(v, "grad") else [v] for k, v in groups.items()}
    raise TypeError("groups must be an optimizer, an nn.Module or a mapping name -> parameters")


def group_grad_norms(groups: Any, norm_type: float = 2.0) -> dict[str, float]:
    """Gradient norm per parameter group (see ``_named_groups`` for what ``groups`` may be)."""
    return {name: global_grad_norm(params, norm_type) for name, params in _named_groups(groups).items()}


_TRAIN_STEP_FIELDS = frozenset(KINDS["train_step"].field_names) | {"policy_version"}


def _step_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Pass-through ``train_step`` fields as plain Python values; unknown names are logged and left out
    (one typo must not cost the whole step's event)."""
    out = {}
    for k, v in fields.items():
        if k not in _TRAIN_STEP_FIELDS:
            warn_limited(("train_step", k), "grad-norm probe: %r is not a train_step field; ignored (valid: %s)",
                         k, ", ".join(sorted(_TRAIN_STEP_FIELDS)))
            continue
        if hasattr(v, "item") and getattr(v, "ndim", getattr(v, "dim", lambda: 0)()) == 0:
            v = v.item()  # torch / numpy scalars
        out[k] = v
    return out


@dataclass(frozen=True, slots=True)
class GradNormResult:
    grad_norm: float
    nonfinite: bool
    spike: bool
    spike_score: float | None
    clipped: bool | None
    grad_norm_clipped: float | None
    detail: dict[str, Any] | None

    def fields(self) -> dict[str, Any]:
        """The ``train_step`` fields this probe fills."""
        return {"grad_norm": self.grad_norm, "nonfinite": self.nonfinite, "spike": self.spike,
                "spike_score": self.spike_score, "clipped": self.clipped,
                "grad_norm_clipped": self.grad_norm_clipped,
                "detail": None if self.detail is None else dumps(self.detail)}


class GradNormProbe:
    """Per-step grad-norm checks; emits the step's ``train_step`` event (other fields passed through).

    max_norm: the clipping threshold the trainer uses (None: no clipping; ``clipped`` stays null).
    detector: a ``SpikeDetector`` (default settings when omitted).
    max_ids: at most this many sample / group ids go into ``detail``.
    """

    def __init__(self, recorder: Recorderish | None = None, *, max_norm: float | None = None,
                 detector: SpikeDetector | None = None, norm_type: float = 2.0, max_ids: int = 256):
        self._recorder = recorder
        self.max_norm = max_norm
        self.detector = detector if detector is not None else SpikeDetector()
        self.norm_type = norm_type
        self.max_ids = max_ids
        self.steps = 0
        self.clipped_steps = 0
        self.nonfinite_steps = 0
        self.spikes: list[int | None] = []  # steps (when known) of detected spikes

    @property
    def clip_fraction(self) -> float:
        """Share of observed steps whose gradient was clipped."""
        return self.clipped_steps / self.steps if self.steps else math.nan

    def observe(self, *, parameters: Iterable[Any] | None = None, grad_norm: float | None = None,
                groups: Any = None, sample_ids: Sequence[Any] | None = None,
                group_ids: Sequence[Any] | None = None, step: int | None = None, emit: bool = True,
                **step_fields: Any) -> GradNormResult:
        """Check one step's gradient. Give ``parameters`` or ``grad_norm``. ``groups`` (optimizer,
        module or mapping) is used for per-group norms at a spike or a non-finite norm.
        ``step_fields`` are other ``train_step`` fields (loss, lr, samples, tokens, step_seconds, ...)."""
        params = None
        if grad_norm is None:
            if parameters is None:
                raise ValueError("give parameters= or grad_norm=")
            params = list(parameters)
            grad_norm = global_grad_norm(params, self.norm_type)
        elif hasattr(grad_norm, "item"):
            grad_norm = grad_norm.item()
        norm = float(grad_norm)
        nonfinite = not math.isfinite(norm)
        judged = self.detector.push(norm)
        score, spike = judged.z, judged.spike
        clipped = None
        after = None
        if self.max_norm is not None and not nonfinite:
            clipped = norm > self.max_norm
            after = min(norm, float(self.max_norm))
        self.steps += 1
        self.clipped_steps += bool(clipped)
        self.nonfinite_steps += nonfinite
        detail: dict[str, Any] | None = None
        if spike or nonfinite:
            if spike:
                self.spikes.append(step)
            detail = {"reason": "nonfinite" if nonfinite else "spike", "grad_norm": norm,
                      "median": judged.baseline, "score": score, "ratio": judged.ratio,
                      "sigma": judged.sigma, "baseline_n": judged.n}
            src = groups if groups is not None else ({"all": params} if params is not None else None)
            if src is not None:
                try:
                    detail["group_norms"] = group_grad_norms(src, self.norm_type)
                except Exception as exc:  # attribution is best effort; never break the step
                    detail["group_norms_error"] = f"{type(exc).__name__}: {exc}"
            if sample_ids is not None:
                ids = as_list(sample_ids)
                detail["sample_ids"] = [str(s) for s in ids[: self.max_ids]]
                detail["samples_total"] = len(ids)
            if group_ids is not None:
                gids = list(dict.fromkeys(str(g) for g in as_list(group_ids)))
                detail["group_ids"] = gids[: self.max_ids]
        result = GradNormResult(norm, nonfinite, spike, score, clipped, after, detail)
        if emit:
            self.emit(result, step=step, **step_fields)
        return result

    def emit(self, result: GradNormResult, *, step: int | None = None, **step_fields: Any) -> None:
        """Emit the step's ``train_step`` event: ``result``'s fields and ``step_fields``. For a trainer that
        observes before the step's other numbers exist (``observe(..., emit=False)``, then ``emit``)."""
        fields = {**_step_fields(step_fields), **result.fields()}
        if step is not None:
            fields["step"] = step
        recorder_or_global(self._recorder).emit("train_step", **fields)
