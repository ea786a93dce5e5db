"""Grad-norm rules: non-finite norms and robust spikes (rolling median / MAD, computed by the doctor)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from rlobs.detect import SPIKE as SPIKE_DEFAULTS
from rlobs.detect import SpikeScore
from rlobs.doctor.context import RunContext, finite
from rlobs.doctor.model import Evidence, Finding, RuleResult, Severity, rule
from rlobs.failures import thresholds


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


# kl_min_rate (forty-fourth early-warning run, 6 Dec 2026): the KL consequence also needs the KL's rise per step since
# the run's first step at the KL-creep rule's min_rate (the failure table's number, not chosen here). A run that
# starts at its reference has a KL near 0 for its first steps and 10x that a few steps later while it learns: two
# healthy KL-term runs' clipped spikes at steps 4-6 (k3 spikes of the trainer's KL estimate) were called critical
_IMPACT = {"impact_steps": 3, "impact_z": 6.0, "entropy_drop": 0.5, "entropy_z": 3.0, "kl_ratio": 10.0,
           "kl_min_rate": thresholds("precursor-kl-creep")["min_rate"]}


def _step_table(ctx: RunContext) -> dict[int, dict[str, float]]:
    """Per step: clipped (any rank), loss / reward / entropy / KL (mean over ranks), non-finite loss."""
    def build() -> dict[int, dict[str, float]]:
        out: dict[int, dict[str, float]] = {}
        for step, clipped, loss, reward, entropy, kl, bad_loss in ctx.rows(
                "SELECT step, bool_or(clipped), avg(loss) FILTER (WHERE isfinite(loss)), avg(reward_mean), "
                "avg(entropy) FILTER (WHERE isfinite(entropy)), avg(kl) FILTER (WHERE isfinite(kl)), "
                "bool_or(NOT isfinite(loss)) FROM train_step "
                f"WHERE step IS NOT NULL{ctx.step_filter()} GROUP BY step"):
            out[int(step)] = {"clipped": clipped, "loss": loss, "reward": reward, "entropy": entropy, "kl": kl,
                              "bad_loss": bool(bad_loss)}
        return out
    return ctx.memo("grad_norm_step_table", build)


def impact(ctx: RunContext, step: int, th: Mapping[str, float]) -> list[Evidence]:
    """What happened after an anomaly at ``step`` (within ``impact_steps``): a non-finite loss or grad norm,
    a loss or reward level shift beyond ``impact_z`` x the run's own noise, entropy dropping below
    ``entropy_drop`` x its level and by more than ``entropy_z`` x its own noise (a healthy held-out run's
    entropy swung 0.23-0.99 from step to step: a halving inside that range is not a collapse), KL growing
    ``kl_ratio``-fold. Empty: the run kept its trend."""
    from rlobs.detect import level_shift, robust_baseline

    k = int(th["impact_steps"])
    table = _step_table(ctx)
    norms = dict(_series(ctx))
    out: list[Evidence] = []
    after = [s for s in sorted(table) if step < s <= step + k]
    bad = [s for s in after if table[s]["bad_loss"] or not math.isfinite(norms.get(s, 0.0))]
    if bad:
        out.append(Evidence("train_step.loss / grad_norm", "NaN/Inf", "finite", (bad[0], bad[-1]),
                            "non-finite after the spike"))
    for col, sign, label in (("loss", 0, "loss level shift"), ("reward", -1, "reward dropped")):
        series = [(s, float(v[col])) for s, v in sorted(table.items()) if finite(v[col])]
        # the pre-window's noise is floored by the whole run's: a GRPO loss is ~0 by construction on-policy
        # (zero-mean advantages, ratio 1), so four early steps at 1e-8 would make any later step a "+5000
        # sigma shift" (a held-out healthy stretch was called critical that way)
        _, run_sigma, _ = robust_baseline([v for _, v in series])
        sh = level_shift(series, step, after=k, min_sigma_abs=max(1e-6, run_sigma if math.isfinite(run_sigma) else 0))
        if sh is not None and ((sign == 0 and abs(sh.z) > th["impact_z"]) or (sign < 0 and sh.z < -th["impact_z"])):
            out.append(Evidence(f"train_step.{'reward_mean' if col == 'reward' else col}", round(sh.after, 6),
                                round(sh.before, 6), (step + 1, step + k),
                                f"{label}: {sh.z:+.1f} sigma of its own noise (before {sh.before:.4g})"))
    ent = [(s, float(v["entropy"])) for s, v in sorted(table.items()) if finite(v["entropy"])]
    sh = level_shift(ent, step, after=k)
    if sh is not None and sh.before > 0 and sh.after < th["entropy_drop"] * sh.before and sh.z < -th["entropy_z"]:
        out.append(Evidence("train_step.entropy", round(sh.after, 6), round(th["entropy_drop"] * sh.before, 6),
                            (step + 1, step + k), "entropy collapsed after the spike"))
    kl = [(s, float(v["kl"])) for s, v in sorted(table.items()) if finite(v["kl"])]
    sh = level_shift(kl, step, after=k)
    rate = (sh.after - kl[0][1]) / max(1, step + k - kl[0][0]) if sh is not None else 0.0  # per step since the start
    if (sh is not None and sh.after > th["kl_ratio"] * max(abs(sh.before), 1e-6) and sh.z > th["impact_z"]
            and rate >= th.get("kl_min_rate", 0.0)):
        out.append(Evidence("train_step.kl", round(sh.after, 6), round(th["kl_ratio"] * sh.before, 6),
                            (step + 1, step + k), f"KL blew up after the spike ({rate:.3g} a step since the "
                            "run's first step)"))
    return out


def spike_scores(ctx: RunContext, th: Mapping[str, float] | None = None) -> list[tuple[int, SpikeScore]]:
    """(step, score) of the one spike detector (``rlobs.detect``) over the run's per-step grad norm: the
    live probe's decision for a single-rank run, step for step (several ranks: the max norm per step)."""
    from rlobs.detect import SPIKE, spikes

    params = {k: (th or SPIKE)[k] for k in SPIKE}
    series = _series(ctx)
    return list(zip((s for s, _ in series), spikes((g for _, g in series), **params)))


@rule("grad-norm-spike", concern="grad_norm", title="Gradient-norm spike",
      needs=("train_step",), thresholds={**SPIKE_DEFAULTS, **_IMPACT})
def spike(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """A grad norm far above the run's own baseline, by ``rlobs.detect.SpikeDetector`` (the live probe's
    detector): log scale, rolling median of the last ``window`` steps with gradient (a zero-norm step is
    never a baseline), robust z > ``threshold`` with sigma >= ``min_sigma`` and at least ``min_ratio`` x the
    median, after ``warmup`` steps. Severity from impact: critical when within ``impact_steps`` the loss
    or reward breaks its level (> ``impact_z`` sigma), the loss/norm turns NaN, entropy collapses or KL
    blows up (that consequence is the evidence); warning for an unclipped spike the run absorbed; info
    for a clipped one the run absorbed (clipping did its job)."""
    series = _series(ctx)
    if not series:
        return _insufficient_grad(ctx)
    scored = spike_scores(ctx, th)
    hits = [(s, sc) for s, sc in scored if sc.spike]
    if not hits:
        usable = sum(1 for _, sc in scored if sc.z is not None or sc.n >= int(th["warmup"]))
        if not usable:
            from rlobs.doctor.model import Insufficient

            n = max((sc.n for _, sc in scored), default=0)
            return Insufficient(f"only {n} grad-norm steps with gradient; the spike detector needs "
                                f"{int(th['warmup'])} before it judges one")
        return []
    table = _step_table(ctx)
    consequences = {s: impact(ctx, s, th) for s, _ in hits}
    broke = [s for s, _ in hits if consequences[s]]
    unclipped = [s for s, _ in hits if table.get(s, {}).get("clipped") is not True]
    worst = max(hits, key=lambda h: h[1].ratio or 0.0)
    ws, wsc = worst
    sev = Severity.CRITICAL if broke else Severity.WARNING if unclipped else Severity.INFO
    what = ("and the run broke after it" if broke else
            "not clipped; the run kept its trend" if unclipped else "clipped; the run kept its trend")
    ev = [Evidence("train_step.grad_norm", round(wsc.value, 6), round(th["min_ratio"] * (wsc.baseline or 0.0), 6),
                   (hits[0][0], hits[-1][0]),
                   f"{wsc.ratio:.3g}x its rolling median {wsc.baseline:.3g} (robust z {wsc.z:.1f} > "
                   f"{th['threshold']:g}, log-scale sigma {wsc.sigma:.3g} from {wsc.n} steps)"),
          Evidence("spike steps", ", ".join(str(s) for s, _ in hits[:10]))]
    for s in broke[:3]:
        ev.extend(consequences[s])
    return [Finding(
        rule="grad-norm-spike", severity=sev,
        title=f"grad norm spiked to {wsc.value:.3g} at step {ws} ({wsc.ratio:.3g}x its rolling median "
              f"{wsc.baseline:.3g}, z {wsc.z:.1f}); {len(hits)} spike step(s), {what}",
        first_step=hits[0][0], last_step=hits[-1][0],
        evidence=ev,
        root_cause="check the advantage denominator before blaming the model: near-zero group std amplifies "
                   "advantages; then stale samples (importance ratio), then train/serve parity"
                   + ("" if broke or unclipped else " (clipping bounded this update: informational)"),
        confidence=0.8 if broke else 0.6,
        remediation=["rlobs doctor RUN --rule advantage-denominator-collapse",
                     "inspect the spiking batch's samples in `rlobs replay RUN` (train_step.detail lists them)",
                     "lower the learning rate or the clip threshold only after the denominator is ruled out"],
    )]
