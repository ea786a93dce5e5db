"""Grad-norm rules: non-finite norms and robust spikes (rolling median / MAD, computed by the doctor)."""

from __future__ import annotations

import math
import statistics
from typing import Mapping

from rlobs.doctor.context import RunContext, finite
from rlobs.doctor.model import Evidence, Finding, RuleResult, Severity, rule


def _series(ctx: RunContext) -> list[tuple[int, float]]:
    """(step, grad norm) with NaN for non-finite steps; several ranks per step: non-finite wins, else max.
    Read once per diagnosis (both grad-norm rules use it)."""
    return ctx.memo("grad_norm_series", lambda: _read_series(ctx))


def _read_series(ctx: RunContext) -> list[tuple[int, float]]:
    per_step: dict[int, float] = {}
    for step, g, nonfinite in ctx.rows("SELECT step, grad_norm, coalesce(nonfinite, false) FROM train_step "
                                       f"WHERE step IS NOT NULL{ctx.step_filter()}"):
        if g is None and not nonfinite:
            continue
        value = float("nan") if nonfinite or g is None or not math.isfinite(g) else float(g)
        prev = per_step.get(int(step))
        if prev is None or not math.isfinite(value) or (math.isfinite(prev) and value > prev):
            per_step[int(step)] = value
    return sorted(per_step.items())


@rule("grad-norm-nonfinite", concern="grad_norm", title="Gradient norm is NaN or Inf", needs=("train_step",))
def nonfinite(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Any step whose pre-clip global grad norm is NaN/Inf (or flagged non-finite by the probe)."""
    series = _series(ctx)
    if not series:
        return _insufficient_grad(ctx)
    bad = [s for s, g in series if not math.isfinite(g)]
    if not bad:
        return []
    return [Finding(
        rule="grad-norm-nonfinite", severity=Severity.CRITICAL,
        title=f"non-finite gradient norm at {len(bad)} step(s), first at step {bad[0]}",
        first_step=bad[0], last_step=bad[-1],
        evidence=[Evidence("train_step.grad_norm", "NaN/Inf", "finite", (bad[0], bad[-1]), f"{len(bad)} steps")],
        root_cause="a NaN/Inf entered the loss or the gradients: check the advantage denominator (std + eps "
                   "with zero-std groups), the importance ratio (log-prob differences overflowing exp), and "
                   "bf16/fp16 overflow, in that order",
        confidence=0.9,
        remediation=["rlobs doctor RUN --rule advantage-denominator-collapse",
                     "skip the update when the grad norm is non-finite (the optimiser state is otherwise poisoned)",
                     "raise eps in (r - mean) / (std + eps); clamp log-ratio before exp"],
    )]


def _insufficient_grad(ctx: RunContext) -> RuleResult:
    from rlobs.doctor.model import Insufficient

    return Insufficient("no train_step events with grad_norm" if ctx.count("train_step") else "no train_step events")


@rule("grad-norm-spike", concern="grad_norm", title="Gradient-norm spike",
      needs=("train_step",), thresholds={"window": 10, "min_history": 4, "ratio": 4.0, "z": 6.0})
def spike(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """A finite grad norm far above its rolling median: x > ratio * median and robust z = (x - median) /
    (1.4826 * MAD) > z, over the previous ``window`` finite, non-zero steps (needs ``min_history`` of them;
    steps without gradient are judged by no-gradient and would make the next normal step look like a spike)."""
    series = _series(ctx)
    if not series:
        return _insufficient_grad(ctx)
    window, min_hist = int(th["window"]), int(th["min_history"])
    history: list[float] = []
    spikes: list[tuple[int, float, float, float]] = []
    for step, g in series:
        if not finite(g) or g <= 0:  # a zero norm is a step without gradient (no-gradient), not a baseline
            continue
        if len(history) >= min_hist:
            med = statistics.median(history[-window:])
            mad = statistics.median(abs(h - med) for h in history[-window:])
            scale = 1.4826 * mad + 0.05 * abs(med) + 1e-12
            z = (g - med) / scale
            if g > th["ratio"] * med and z > th["z"]:
                spikes.append((step, g, med, z))
                continue  # a spike does not join the baseline
        history.append(g)
    if not spikes:
        if len(history) < min_hist:
            from rlobs.doctor.model import Insufficient

            return Insufficient(f"only {len(history)} finite grad-norm steps; the spike detector needs {min_hist}")
        return []
    worst = max(spikes, key=lambda s: s[1] / max(s[2], 1e-12))
    sev = Severity.CRITICAL if worst[1] > 100 * worst[2] else Severity.WARNING
    return [Finding(
        rule="grad-norm-spike", severity=sev,
        title=f"grad norm spiked to {worst[1]:.3g} at step {worst[0]} ({worst[1] / max(worst[2], 1e-12):.0f}x its "
              f"rolling median {worst[2]:.3g}); {len(spikes)} spike step(s)",
        first_step=spikes[0][0], last_step=spikes[-1][0],
        evidence=[Evidence("train_step.grad_norm", round(worst[1], 6), round(th["ratio"] * worst[2], 6),
                           (spikes[0][0], spikes[-1][0]), f"robust z {worst[3]:.1f} > {th['z']}")]
        + [Evidence("spike steps", ", ".join(str(s[0]) for s in spikes[:10]))],
        root_cause="check the advantage denominator before blaming the model: near-zero group std amplifies "
                   "advantages; then stale samples (importance ratio), then train/serve parity",
        confidence=0.6,
        remediation=["rlobs doctor RUN --rule advantage-denominator-collapse",
                     "inspect the spiking batch's samples in `rlobs replay RUN` (train_step.detail lists them)",
                     "lower the learning rate or the clip threshold only after the denominator is ruled out"],
    )]
