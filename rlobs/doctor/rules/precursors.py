"""Early-warning rules: precursors of a coming collapse, seen before the reward shows it.

Each drift rule runs ``rlobs.detect.DriftDetector`` in fast-drift mode (the median of the last ``window`` steps against
the median of the ``baseline`` steps ending ``lag`` steps earlier, ``h`` robust sigmas and ``min_effect`` apart; a
Theil-Sen slope for the time to impact) over one per-step signal, step by step, so the step a finding
names is the first step at which the record *up to that step* already showed the drift: the same answer
``rlobs doctor --follow`` gives while the run is written (``bench/early_warning.py`` replays records step by
step to measure it, and ``tests/early_warning/test_precursors.py`` checks the two agree).

| rule | signal | coming failure | action |
|---|---|---|---|
| precursor-grad-norm-drift | pre-clip grad norm rising (log scale) | divergence: the policy jumps, reward breaks | lower the learning rate |
| precursor-entropy-decline | token entropy falling while the reward does not improve | entropy collapse: exploration stops, reward plateaus / falls | raise the temperature, add an entropy bonus, lower the learning rate |
| precursor-importance-truncation | share of tokens whose importance ratio is truncated, or mean staleness, rising | off-policy divergence | tighten max staleness, keep/raise IS truncation |
| precursor-kl-creep | KL to the reference rising | KL blow-up: the policy leaves the reference | raise kl_coef, lower the learning rate |
| precursor-zero-std-rising | share of zero-std groups rising while the reward is low | learning stops (no gradient signal) | raise temperature / group size, filter solved or unsolvable prompts |
| precursor-uncorrected-off-policy | effective sample size of the importance ratios low while the loss applies no correction | off-policy divergence (held-out success falls) | turn truncated IS on, tighten max staleness |
| precursor-oversized-updates | each update moves the policy far (KL before/after the step) while its entropy has narrowed | learning-rate collapse (reward plateaus, held-out success falls) | lower the learning rate / warm-up peak |
| precursor-reward-hacking | training reward climbing while held-out success does not follow | reward hacking: the grader pays for a loophole, held-out success falls | audit and fix the grader, resume from before the warning |

Learning is not a precursor: a healthy run's entropy falls and its solved groups turn zero-std as its reward
climbs. The entropy and zero-std rules therefore stay silent while the training reward is above its early
level by ``learning_gain`` (and while the reward is high, over ``solved_reward``: solved, not stuck; a converging
policy sharpens).

``precursor-uncorrected-off-policy`` is a level rule, not a drift: stale samples whose importance ratios have
lost a fifth of their effective sample size (median of the last ``window`` steps under ``ess_below``, at
``min_steps`` steps running: a few low steps close together are a burst) are trained on
with no importance correction (``staleness.is_correction_cap`` 0, or the run config's ``tis_cap`` 0): the update
is biased towards the policies that generated them, every step. With correction on, the same ESS is what the
truncation handles (``precursor-importance-truncation`` watches it). ``precursor-oversized-updates`` is a level
too: ``min_steps`` of the last ``window`` steps' ``train_step.policy_kl`` (how far each optimiser step moved the
policy, nats per token) over ``kl_above`` while the entropy over the same steps is under ``entropy_share_below`` of
the run's first ``baseline`` steps and the reward has climbed ``reward_gain`` above them (or held-out success
``heldout_gain`` over its first evaluation), unless the policy is solved (the window's median zero-std share at least
``solved_zero_std`` at a median reward of ``solved_reward``: the few groups left carry each update, and Adam scales
their noise to an lr-sized step): an lr that is too high is too high from its first step, so there is no
in-run baseline to drift from, and large steps on a policy that has not narrowed or learned are how an untrained
policy moves, up to a size: its first-steps leg warns, with no guard, when ``early_min_steps`` of
``early_window`` updates inside the run's first ``early_steps`` steps are over ``early_kl_above``, or their median
is over ``early_median_above`` (the lr's own size: Adam's first few updates are large at any lr and then shrink; a
too-high lr keeps them large). Thresholds
come from the failure table (``rlobs.failures``), chosen on the calibration runs of ``bench/early_warning.py``
and reported on other seeds (README, "Early warning").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rlobs.catalogue import AUDIT_SCALARS, HELDOUT_SCALARS
from rlobs.detect import Drift, DriftDetector
from rlobs.doctor.context import RunContext, finite
from rlobs.doctor.model import (
    Evidence,
    Finding,
    Insufficient,
    RuleResult,
    Severity,
    rule,
)

Series = list[tuple[int, float]]


def _per_step(ctx: RunContext, kind: str, sql: str) -> Series:
    if not ctx.count(kind):
        return []
    return [(int(s), float(v)) for s, v in ctx.rows(sql) if s is not None and finite(v)]


def _cap(series: Series, ctx: RunContext) -> Series:
    """Only the steps the record had when judged: ``ctx.until_step`` (set by a step-by-step replay) caps it."""
    until = getattr(ctx, "until_step", None)
    return series if until is None else [(s, v) for s, v in series if s <= until]


def series(ctx: RunContext, name: str) -> Series:
    """One per-step signal, read once per diagnosis (a replay re-uses it for every step it judges)."""
    f = ctx.step_filter()
    where = f"WHERE step IS NOT NULL AND isfinite({{col}}){f} GROUP BY step ORDER BY step"
    kind, agg, col = {
        "grad_norm": ("train_step", "max", "grad_norm"), "entropy": ("train_step", "avg", "entropy"),
        "kl": ("train_step", "avg", "kl"), "reward": ("train_step", "avg", "reward_mean"),
        "is_clipped": ("staleness", "max", "is_clipped_ratio"), "staleness": ("staleness", "max", "mean_staleness"),
        "zero_std": ("advantage", "max", "zero_std_ratio"), "ess": ("staleness", "min", "ess_ratio"),
        "correction_cap": ("staleness", "max", "is_correction_cap"),
        "policy_kl": ("train_step", "avg", "policy_kl"), "lr": ("train_step", "max", "lr"),
    }[name]
    sql = (kind, f"SELECT step, {agg}({col}) FROM {kind} " + where.format(col=col))
    return _cap(ctx.memo(("precursor_series", name), lambda: _per_step(ctx, *sql)), ctx)


# held-out success (exact-match on prompts the run never trains on): trainer_ref's evaluations, or the canonical name
# (rlobs.catalogue.HELDOUT_SCALARS: the live gauge rlobs_heldout_success reads the same names)


# the training reward's excess over an audit grader on the same samples (trainer_ref: --audit-grader, exact by default)
# (rlobs.catalogue.AUDIT_SCALARS, as the gauge rlobs_grader_audit_gap)


def _scalars(ctx: RunContext, key: str, names: tuple[str, ...]) -> Series:
    f = ctx.step_filter()
    quoted = ", ".join(f"'{n}'" for n in names)
    sql = (f"SELECT step, avg(value) FROM scalar WHERE name IN ({quoted}) AND step IS NOT NULL AND isfinite(value){f} "
           "GROUP BY step ORDER BY step")
    return _cap(ctx.memo(("precursor_series", key), lambda: _per_step(ctx, "scalar", sql)), ctx)


def heldout(ctx: RunContext) -> Series:
    """Held-out success per evaluation step (scalar events named in ``HELDOUT_SCALARS``), capped like ``series``."""
    return _scalars(ctx, "heldout", HELDOUT_SCALARS)


def audit_gap(ctx: RunContext) -> Series:
    """The training reward minus an audit grader's reward on the same samples, per step (``AUDIT_SCALARS``)."""
    return _scalars(ctx, "audit_gap", AUDIT_SCALARS)


def _reward_at(reward: Series, step: int, th: Mapping[str, float]) -> tuple[float | None, float | None]:
    """(reference level, recent level) of the training reward as of ``step``, over the detector's own windows:
    the median of the baseline steps (after ``skip``; with ``lag``, the ``baseline`` steps ending ``lag`` steps
    ago) and of the last ``window`` steps up to ``step``."""
    upto = [v for s, v in reward if s <= step]
    n0, k, w, lag = int(th["skip"]), int(th["baseline"]), int(th["window"]), int(th.get("lag", 0))
    if lag > 0:
        if len(upto) < k + lag:
            return None, None
        return statistics.median(upto[-(k + lag):-lag]), statistics.median(upto[-w:])
    if len(upto) < n0 + k + 1:
        return None, None
    return statistics.median(upto[n0:n0 + k]), statistics.median(upto[-w:])


def _detector_params(th: Mapping[str, float]) -> dict[str, float]:
    out = {k: th[k] for k in ("baseline", "skip", "k", "h", "min_rel", "min_abs", "window", "min_effect")}
    return {**out, "lag": int(th.get("lag", 0))}


@dataclass(frozen=True)
class Precursor:
    id: str
    signal: str  # series() name
    direction: int
    log: bool
    label: str  # the evidence's metric
    coming: str  # the failure it precedes
    target: Callable[[float, Mapping[str, float]], float]  # impact level from the early level
    root_cause: str
    actions: tuple[str, ...]
    learning_guard: bool = False  # silent while the reward has risen by learning_gain
    solved_guard: bool = False  # silent while the reward is above solved_reward


def _silenced(p: Precursor, th: Mapping[str, float], d: Drift, s: int, points: Series, reward: Series) -> bool:
    """A guard keeps the detector's alarm at step ``s`` from being a warning."""
    if "min_level" in th and p.direction * (d.level - th["min_level"]) < 0:
        return True  # a share rising from 0 to 1 group of 8 is a trend of nothing: the level must matter
    if "min_rate" in th and _rate(d, s, points) < th["min_rate"]:
        return True  # risen from the run's start, but no faster than a run that learns moves (see _rate)
    if reward:
        early, recent = _reward_at(reward, s, th)
        if early is not None and recent is not None:
            if p.learning_guard and recent >= early + th["learning_gain"]:
                return True  # the reward climbs: this drift is learning
            if p.solved_guard and recent >= th["solved_reward"]:
                return True  # groups are solved, not stuck
    return False


def _first_alarm(p: Precursor, ctx: RunContext, th: Mapping[str, float], points: Series) -> tuple[Drift, int] | None:
    """The first step the online detector alarms on with no guard silencing it, ``min_alarms`` steps running (a
    spike is not a creep), and how many such steps followed."""
    det = DriftDetector(p.direction, log=p.log, target=None, **_detector_params(th))
    reward = series(ctx, "reward") if (p.learning_guard or p.solved_guard) else []
    need = int(th.get("min_alarms", 1))
    first, count, running = None, 0, 0
    for s, v in points:
        d = det.push(s, v)
        running = 0 if d is None or _silenced(p, th, d, s, points, reward) else running + 1
        if running < max(need, 1):
            continue
        if first is None:
            first = Drift(d.step, d.onset, d.base, d.sigma, d.level, d.effect, d.cusum, d.slope,
                          _eta(p, d, th))
        count += 1
    return (first, count) if first is not None else None


def _rate(d: Drift, step: int, points: Series) -> float:
    """How fast the signal has risen since the run's first step: (recent median - early level) / steps elapsed, in
    the signal's own units per step. The KL to the reference starts at 0 (the policy is the reference) and grows in
    every run that learns, so that it rose is no precursor; how fast it rose is."""
    return (d.level - d.base) / max(1, step - points[0][0])


def _eta(p: Precursor, d: Drift, th: Mapping[str, float]) -> float | None:
    """Steps until the signal reaches the failure's level at the recent slope (0: there already; None: no
    slope towards it)."""
    target = p.target(d.base, th)
    if p.log:
        level, tgt, slope = math.log(max(d.level, 1e-12)), math.log(max(target, 1e-12)), d.slope
    else:
        level, tgt, slope = d.level, target, d.slope
    gap = p.direction * (tgt - level)
    if gap <= 0:
        return 0.0
    if slope is None or p.direction * slope <= 0:
        return None
    return gap / (p.direction * slope)


def judge(p: Precursor, ctx: RunContext, th: Mapping[str, float], points: Series) -> RuleResult:
    lag = int(th.get("lag", 0))
    need = int(th["skip"]) + int(th["baseline"]) + max(lag, 3)
    if len(points) < need:
        return Insufficient(f"{len(points)} steps with {p.label}; the drift detector needs {need} "
                            f"({int(th['baseline'])} reference steps, then {max(lag, 3)} more to judge)")
    hit = _first_alarm(p, ctx, th, points)
    if hit is None:
        return []
    d, _count = hit
    target = p.target(d.base, th)
    eta = ("already there" if d.eta == 0.0 else f"~{d.eta:.0f} steps at the current slope"
           if d.eta is not None else "not yet heading there")
    change = (f"{d.effect + 1:.2f}x" if p.log else f"{d.effect:+.0%}") if p.direction > 0 else f"{-d.effect:+.0%}"
    ev = [Evidence(p.label, round(d.level, 6), round(d.base, 6), (d.onset, d.step),
                   f"median of the last {int(th['window'])} steps vs {d.base:.4g} before ({change}); "
                   f"{d.cusum:.1f} > {th['h']:g} robust sigma (noise {d.sigma:.3g}{' on log scale' if p.log else ''})"),
          Evidence("slope per step (Theil-Sen, last steps)",
                   round(d.slope, 6) if d.slope is not None else "n/a"),
          Evidence("expected time to impact", round(d.eta, 1) if d.eta is not None else "unknown",
                   round(target, 6), None, f"steps until {p.label} reaches {target:.4g} ({p.coming})")]
    if "min_rate" in th:
        ev.append(Evidence(f"{p.label} gained per step since the run's first step", round(_rate(d, d.step, points), 6),
                           th["min_rate"], (points[0][0], d.step),
                           "faster than a run that learns moves it (the threshold)"))
    if p.learning_guard or p.solved_guard:
        early, recent = _reward_at(series(ctx, "reward"), d.step, th)
        if early is not None:
            ev.append(Evidence("train_step.reward_mean (recent vs before)", round(recent, 4), round(early, 4), None,
                               "the reward is not climbing: the drift is not learning"))
    return [Finding(
        rule=p.id, severity=Severity.WARNING,
        title=f"early warning: {p.label} drifting since step {d.onset} ({change} vs its level just before, by step "
              f"{d.step}); {p.coming} expected in {eta}",
        first_step=d.step, last_step=d.step,
        evidence=ev, root_cause=p.root_cause, confidence=0.6, remediation=list(p.actions),
    )]


PRECURSORS: dict[str, Precursor] = {p.id: p for p in (
    Precursor("precursor-grad-norm-drift", "grad_norm", +1, True, "train_step.grad_norm",
              "divergence (reward breaks, entropy collapses)", lambda b, th: b * th["impact_ratio"],
              "updates grow step after step: the learning rate is too high for this model and batch (or the "
              "advantages are inflated); the clipped norm hides it until the policy jumps",
              ("lower the learning rate (e.g. /3) and resume from the last checkpoint before the drift",
               "check the advantage denominator first: rlobs doctor RUN --rule advantage-denominator-collapse",
               "tighten max_grad_norm while investigating")),
    Precursor("precursor-entropy-decline", "entropy", -1, False, "train_step.entropy",
              "entropy collapse (exploration stops, reward plateaus or falls)", lambda b, th: b * th["impact_ratio"],
              "the policy sharpens without the reward improving: too high a learning rate, too low a sampling "
              "temperature, no entropy regularisation, or one answer style the reward favours",
              ("raise the sampling temperature or add an entropy bonus / clip-higher",
               "lower the learning rate",
               "rlobs doctor RUN --rule entropy-collapse --rule advantage-zero-std-groups"),
              learning_guard=True, solved_guard=True),
    Precursor("precursor-importance-truncation", "is_clipped", +1, False, "staleness.is_clipped_ratio",
              "off-policy divergence (stale samples dominate the update)", lambda b, th: th["impact_share"],
              "the generator's samples drift away from the trainer's policy: staleness grows and more tokens "
              "need their importance ratio truncated (or, with correction off, carry a ratio nobody corrects)",
              ("tighten max_staleness (drop older samples) or slow the generator down",
               "keep truncated importance sampling on (tis_cap) and lower the learning rate",
               "rlobs doctor RUN --rule staleness-growing --rule parity-drift")),
    Precursor("precursor-kl-creep", "kl", +1, True, "train_step.kl",
              "KL blow-up (the policy leaves the reference, reward breaks)", lambda b, th: b * th["impact_ratio"],
              "the KL to the reference grows step after step: the KL penalty is too weak for the learning rate",
              ("raise kl_coef or lower the learning rate",
               "resume from a checkpoint before the creep started")),
    Precursor("precursor-zero-std-rising", "zero_std", +1, False, "advantage.zero_std_ratio",
              "learning stops (most groups carry no gradient signal)", lambda b, th: th["impact_share"],
              "more and more groups score identically while the reward is low: the policy collapsed onto "
              "answers that are all wrong (or all the same), so GRPO has nothing to compare",
              ("raise the sampling temperature or the group size",
               "lower the learning rate; resume from a checkpoint before the rise",
               "filter prompts every sample fails (dynamic sampling)"),
              learning_guard=True, solved_guard=True),
)}


def _register(p: Precursor, needs: tuple[str, ...], doc: str, defaults: Mapping[str, float]) -> None:
    def fn(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
        points = series(ctx, p.signal)
        if p.id == "precursor-importance-truncation" and not points:
            return Insufficient("no staleness events with is_clipped_ratio (importance-sampling statistics)")
        return judge(p, ctx, th, points)

    fn.__doc__ = doc
    fn.__name__ = p.id.replace("-", "_")
    rule(p.id, concern="early_warning", title=f"Early warning: {p.coming.split(' (')[0]}", needs=needs,
         thresholds=defaults)(fn)


for _p, _needs in ((PRECURSORS["precursor-grad-norm-drift"], ("train_step",)),
                   (PRECURSORS["precursor-entropy-decline"], ("train_step",)),
                   (PRECURSORS["precursor-importance-truncation"], ("staleness",)),
                   (PRECURSORS["precursor-kl-creep"], ("train_step",)),
                   (PRECURSORS["precursor-zero-std-rising"], ("advantage", "train_step"))):
    _register(_p, _needs, (
        f"Early warning of {_p.coming}: {_p.label} drifts "
        f"{'up' if _p.direction > 0 else 'down'} fast (the median of the last ``window`` "
        f"{'log ' if _p.log else ''}values against the median of the ``baseline`` values ending ``lag`` steps "
        "earlier, ``h`` robust sigmas and ``min_effect`` apart"
        + (", silent while the training reward has risen by ``learning_gain``" if _p.learning_guard else "")
        + (" or sits above ``solved_reward``" if _p.solved_guard else "")
        + "). The finding names the coming failure, the evidence, the expected steps to impact at the recent "
          "slope and the action. Thresholds: the failure table (rlobs.failures)."), {})


UNCORRECTED = "precursor-uncorrected-off-policy"


def correction_cap(ctx: RunContext) -> float | None:
    """The importance-ratio cap the trainer's loss applies: the staleness events' ``is_correction_cap`` (schema
    1.4), else the run config's ``tis_cap`` (trainer_ref records written before 1.4); None when neither says."""
    caps = series(ctx, "correction_cap")
    if caps:
        return caps[-1][1]
    cap = ctx.cfg("tis_cap", "trainer.tis_cap")
    return float(cap) if isinstance(cap, (int, float)) and not isinstance(cap, bool) else None


def known_correction_cap(ctx: RunContext) -> float | Insufficient:
    """``correction_cap``, or the insufficient-data answer of a rule about uncorrected stale samples when the record
    does not say (this rule, and the staleness concern's ``staleness-uncorrected``)."""
    cap = correction_cap(ctx)
    if cap is None:
        return Insufficient("the record does not say whether the loss corrects stale samples (no "
                            "staleness.is_correction_cap, no tis_cap in the run config)")
    return cap


@rule(UNCORRECTED, concern="early_warning", title="Early warning: off-policy divergence (uncorrected stale samples)",
      needs=("staleness",), thresholds={})
def uncorrected_off_policy(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Early warning of an off-policy divergence: the importance ratios of the consumed samples (current policy
    over the one that generated them) have an effective sample size under ``ess_below`` of the tokens (median of
    the last ``window`` steps, at ``min_steps`` consecutive steps; one is enough once the samples are
    ``fast_staleness`` versions old; at ``far_staleness`` versions, ``far_min_below`` of the last ``window`` steps
    under ``ess_below`` is enough) at a mean staleness of at least ``min_staleness`` versions, and the loss
    applies no importance correction (cap 0): every step's update is biased towards stale policies. Quiet when the correction
    is on or unknown. Thresholds: the failure table (rlobs.failures)."""
    ess = series(ctx, "ess")
    if not ess:
        return Insufficient("no staleness events with ess_ratio (importance-sampling statistics)")
    cap = known_correction_cap(ctx)
    if isinstance(cap, Insufficient):
        return cap
    if cap > 0:
        return []
    w, persist = int(th["window"]), int(th.get("min_steps", 1))
    stale = dict(series(ctx, "staleness"))
    run = 0
    for i in range(w - 1, len(ess)):
        last = ess[i - w + 1:i + 1]
        level = statistics.median(v for _, v in last)
        st = [stale[s] for s, _ in last if s in stale]
        mean_st = statistics.median(st) if st else 0.0
        run = 0 if level >= th["ess_below"] or mean_st < th["min_staleness"] else run + 1
        need = 1 if mean_st >= th.get("fast_staleness", math.inf) else persist  # far behind: no burst to wait out
        below = sum(1 for _, v in last if v < th["ess_below"])
        far = mean_st >= th.get("far_staleness", math.inf) and below >= th.get("far_min_below", math.inf)
        if run < need and not far:
            continue
        step = ess[i][0]
        first = next((s for s, v in ess[:i + 1] if v < th["ess_below"] and stale.get(s, 0.0) >= th["min_staleness"]),
                     step)
        return [Finding(
            rule=UNCORRECTED, severity=Severity.WARNING,
            title=(f"early warning: stale samples trained on without importance correction, their effective sample "
                   + (f"size down to {level:.0%} of the tokens" if run >= need else
                      f"size under {th['ess_below']:.0%} of the tokens on {below} of the last {w} steps")
                   + f" by step {step} (staleness {mean_st:.1f}); off-policy "
                   f"divergence expected within {th['impact_steps_low']:g}-{th['impact_steps_high']:g} steps"),
            first_step=step, last_step=step,
            evidence=[Evidence("staleness.ess_ratio", round(level, 4), th["ess_below"], (first, step),
                               (f"median of the last {w} steps ({run} steps running)" if run >= need else
                                f"{below} of the last {w} steps under {th['ess_below']:g} at a median staleness "
                                f"of {th['far_staleness']:g}+ versions")
                               + "; 1.0 = on-policy, the rest of the batch's weight is "
                               "carried by a few tokens the stale policy sampled unlike the current one"),
                      Evidence("staleness.mean_staleness", round(mean_st, 3), th["min_staleness"], (first, step),
                               "median over the same steps (policy versions between generation and training)"),
                      Evidence("importance correction cap (tis_cap)", cap, None, None,
                               "0: the loss uses the stale samples as if on-policy"),
                      Evidence("expected time to impact", f"{th['impact_steps_low']:g}-{th['impact_steps_high']:g} steps",
                               None, None, "held-out success fell this many steps after the warning in "
                               "bench/early_warning.py's staleness-without-IS runs")],
            root_cause=("the generator runs ahead of the trainer (staleness) and the loss applies no importance "
                        "correction, so the gradient follows the stale policies' samples; the bias grows with the "
                        "gap between the policies (the falling ESS) and compounds step after step"),
            confidence=0.7,
            remediation=["turn truncated importance sampling on (trainer_ref: --tis-cap 2; verl: rollout "
                         "correction / TIS; AReaL: decoupled PPO)",
                         "tighten max_staleness (e.g. 1-2) or slow the generator down",
                         "resume from a checkpoint before the warning; rlobs doctor RUN --rule staleness-over-bound"],
        )]
    return []


OVERSIZED = "precursor-oversized-updates"


@rule(OVERSIZED, concern="early_warning", title="Early warning: learning-rate collapse (oversized policy updates)",
      needs=("train_step",), thresholds={})
def oversized_updates(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Early warning of a learning-rate collapse: at least ``min_steps`` of the last ``window`` optimiser steps moved
    the policy by more than ``kl_above`` nats per token (``train_step.policy_kl``: KL(before || after) on the step's
    re-scored samples; single large steps are the estimator's tail on a sharpened policy) while the policy has
    narrowed to under ``entropy_share_below`` of its early entropy and the training reward has climbed by
    ``reward_gain`` (medians of the same steps against the medians of the first ``baseline`` steps) or held-out
    success has gained ``heldout_gain`` over its first evaluation (a training reward can hide learning); where the
    record has two or more held-out evaluations by then, the training reward's climb counts only if held-out success
    has gained ``reward_heldout_floor`` as well (a noisy reward climbs on a policy that learned nothing held out:
    healthy-tiny-s249 warned at step 55 on +0.20 with held-out success never above its first evaluation: the floor
    asks only that held-out success confirmed the climb once, its best evaluation so far). Where held-out success is
    the only evidence of learning, its gain is the mean of its last ``heldout_recent`` evaluations after the first,
    against the first: what the policy holds now (the best of a long noisy run's evaluations passes for learning:
    healthy-tiny-s266's +0.16 at step 10, back under its first by step 25, warned at 50), and the
    policy is not solved (a median ``solved_zero_std`` of the same steps' groups zero-std at a median reward of
    ``solved_reward``: healthy-t07-s214 took a burst of such updates from its last unsolved groups at steps 54-58 and
    held 0.87-0.91 held out to step 100). Large steps
    on an untrained policy are how it moves (and a run that never learned has nothing to lose: no-learning's
    business); large steps on a policy that has found its answers throw it off them. From the run's first step,
    updates over ``early_kl_above`` (``early_min_steps`` of ``early_window`` within ``early_steps`` steps), or a window
    whose median update is over ``early_median_above``, warn without those guards: a run that learns does not keep
    moving its policy that far step after step (Adam's first few steps are large at any lr and then shrink; a too-high
    lr keeps them large). Whichever leg holds first is the finding. Either leg judges a step only if that step
    had a gradient (grad norm over ``no_gradient_eps``, no-gradient's 1e-10): a step without one (every group zero-std: SmolLM2's echo
    task solved by step 5 of `make main MODEL=smollm2`, 4 updates of the window it ended over the bar; Adam's momentum
    alone moved it 3e-5 nats) throws nothing off.
    Quiet without ``policy_kl`` (insufficient data).
    Thresholds: the failure table (rlobs.failures)."""
    kl = series(ctx, "policy_kl")
    if not kl:
        return Insufficient("no train_step.policy_kl (how far each update moved the policy; schema 1.5, "
                            "trainer_ref's policy_change_samples)")
    w, k = int(th["window"]), int(th["baseline"])
    ent = dict(series(ctx, "entropy"))
    early = [ent[s] for s, _ in kl[:k] if s in ent]
    if len(kl) < max(w, k) or len(early) < k:
        return Insufficient(f"{len(kl)} steps with policy_kl and an entropy; the rule needs {max(w, k)}")
    e0 = statistics.median(early)
    if e0 <= 0:
        return Insufficient("the policy's early entropy is 0: nothing left to sharpen")
    reward = dict(series(ctx, "reward"))
    zero_std = dict(series(ctx, "zero_std"))
    r_early = [reward[s] for s, _ in kl[:k] if s in reward]
    r0 = statistics.median(r_early) if r_early else None
    held = heldout(ctx)
    # the first-steps leg: the run's own first step, not the first one a --since-step window shows
    start = ctx.scalar("SELECT min(step) FROM train_step WHERE step IS NOT NULL AND isfinite(policy_kl)")
    early_end = (start if start is not None else kl[0][0]) + th.get("early_steps", 0) - 1
    ew = int(th["early_window"])
    idle = {s for s, g in series(ctx, "grad_norm") if g <= th.get("no_gradient_eps", -1.0)}
    from_start = None
    for i in range(ew - 1, len(kl)):
        last = kl[i - ew + 1:i + 1]
        if last[-1][0] > early_end:
            break
        if last[-1][0] in idle:
            continue  # this step had no gradient (no group had a reward std): the pattern is not going on
        over = sum(v > th["early_kl_above"] for _, v in last)
        if over >= th["early_min_steps"] or statistics.median(v for _, v in last) > th["early_median_above"]:
            from_start = _oversized_from_start(ctx, th, last, over)
            break
    for i in range(max(w, k) - 1, len(kl)):
        if from_start is not None and kl[i][0] >= from_start.first_step:
            break  # whichever leg held first is the finding: what `--follow` printed first
        last = kl[i - w + 1:i + 1]
        if last[-1][0] in idle:
            continue  # as above: a solved task's steps (every group all correct) move nothing, throw nothing off
        level = statistics.median(v for _, v in last)
        over = sum(v > th["kl_above"] for _, v in last)
        ents = [ent[s] for s, _ in last if s in ent]
        if over < th["min_steps"] or not ents:
            continue  # one large update is noise (a sampled token the old policy found unlikely); most is a pattern
        share = statistics.median(ents) / e0
        if share >= th["entropy_share_below"]:
            continue
        rs = [reward[s] for s, _ in last if s in reward]
        zs = [zero_std[s] for s, _ in last if s in zero_std]
        zs_level = statistics.median(zs) if zs else None
        if (zs_level is not None and rs and zs_level >= th.get("solved_zero_std", math.inf)
                and statistics.median(rs) >= th["solved_reward"]):
            continue  # a solved policy: most groups all correct, the few left carry each update (Adam scales it)
        gain = statistics.median(rs) - r0 if rs and r0 is not None else None
        step = kl[i][0]
        evals = [v for s, v in held if s <= step]
        h_gain = _heldout_gain(evals, int(th.get("heldout_recent", 0)))
        by_reward = gain is not None and gain >= th["reward_gain"]
        if by_reward and len(evals) >= 2 and max(evals) - evals[0] < th.get("reward_heldout_floor", -math.inf):
            by_reward = False  # held-out success is measured and never moved: the reward's climb is not learning
        if not (by_reward or (h_gain is not None and h_gain >= th.get("heldout_gain", math.inf))):
            continue  # nothing learned yet to lose: a policy that never learned is no-learning's business
        lr_now = dict(series(ctx, "lr")).get(step)
        climbed = f"training reward {gain:+.2f}" if by_reward else f"held-out success {h_gain:+.2f}"
        ev = [Evidence("train_step.policy_kl", round(level, 6), th["kl_above"], (last[0][0], step),
                       f"median of the last {w} steps, {over} of them over {th['kl_above']:g}: nats per token each "
                       "update moves the policy (KL before || after, re-scored samples)"),
              Evidence("train_step.entropy (share of its early level)", round(share, 3), th["entropy_share_below"],
                       (last[0][0], step), f"median of the same steps / {e0:.4g}, the median of the first {k}"),
              Evidence("train_step.reward_mean (gain over its early level)",
                       round(gain, 4) if gain is not None else "n/a", th["reward_gain"], (last[0][0], step),
                       f"median of the same steps - {r0:.4g}, the median of the first {k}: what the run has learned, "
                       "and can lose" if r0 is not None else "no training reward in the record"),
              Evidence("held-out success (gain over the first evaluation)",
                       round(h_gain, 4) if h_gain is not None else "n/a", th.get("heldout_gain"), None,
                       f"{_heldout_how(len(evals), int(th.get('heldout_recent', 0)))} - the first: learning the "
                       "training reward may not show (a noisy or shaped reward)" if evals
                       else "no held-out evaluations in the record"),
              Evidence("expected time to impact", f"{th['impact_steps_low']:g}-{th['impact_steps_high']:g} steps",
                       None, None, "held-out success or the training reward fell this many steps after the warning "
                       "in bench/early_warning.py's learning-rate runs")]
        if lr_now is not None:
            ev.insert(2, Evidence("train_step.lr", lr_now, None, None, "the learning rate at the warning"))
        gap = statistics.median(rs) - evals[-1] if rs and evals else None
        hacking = gap is not None and gap >= th.get("hacking_gap", math.inf)
        if hacking:  # an annotation, not a condition: what the steps throw the policy towards
            ev.insert(-1, Evidence("training reward over held-out success", round(gap, 4), th["hacking_gap"], None,
                                   f"median training reward of the same steps - the last held-out evaluation "
                                   f"({evals[-1]:.3g}): the reward pays for something held-out success does not "
                                   "measure (a grader loophole: reward hacking)"))
        return [Finding(
            rule=OVERSIZED, severity=Severity.WARNING,
            title=(f"early warning: {over} of the last {w} updates moved the policy > {th['kl_above']:g} nats/token "
                   f"(median {level:.3g}) after the run learned ({climbed}), its entropy down to {share:.0%}, by "
                   f"step {step}; a learning-rate collapse expected within {th['impact_steps_low']:g}-"
                   f"{th['impact_steps_high']:g} steps"),
            first_step=step, last_step=step, evidence=ev,
            root_cause=("the learning rate (or a warm-up peak) is too high for this model: every optimiser step "
                        "moves the policy far, and once it has narrowed onto one answer form such steps throw it "
                        "off the answers it found (the training reward plateaus, then held-out success falls)"
                        + ("; the training reward far above held-out success says what they are thrown towards: "
                           "the grader rewards something that is not success (reward hacking), and the large "
                           "steps learn the loophole fast" if hacking else "")),
            confidence=0.6,
            remediation=[*(["audit the grader on the run's own samples (rlobs app: the rollouts the reward pays "
                            "for and held-out success fails), fix the loophole, resume from a checkpoint before the "
                            "warning"] if hacking else []),
                         "lower the learning rate (e.g. /3) or the warm-up peak, and resume from a checkpoint "
                         "before the warning",
                         "keep each update small: per-token policy KL per step around 1e-3 is where the "
                         "healthy runs of the bench sit (PPO's target_kl / early stopping bounds the same number)",
                         "rlobs doctor RUN --rule precursor-entropy-decline --rule precursor-grad-norm-drift"],
        )]
    return [from_start] if from_start is not None else []


def _heldout_gain(evals: Sequence[float], recent: int) -> float | None:
    """What held-out success has gained over its first evaluation, as ``precursor-oversized-updates`` reads it: the
    mean of the last ``recent`` evaluations after the first (0: the best of them). The best of a noisy series grows
    with its length (32 prompts x 4 samples swing 0.1-0.2 between evaluations of a policy that learns nothing), so a
    long healthy run's best evaluation passes for learning; its recent level says what it holds now, and can lose."""
    if not evals:
        return None
    if recent <= 0 or len(evals) < 2:
        return max(evals) - evals[0]
    last = evals[1:][-recent:]
    return sum(last) / len(last) - evals[0]


def _heldout_how(n: int, recent: int) -> str:
    if recent <= 0 or n < 2:
        return f"best of {n} evaluations so far"
    return f"mean of the last {min(recent, n - 1)} of {n} evaluations so far"


def _oversized_from_start(ctx: RunContext, th: Mapping[str, float], last: Series, over: int) -> Finding:
    """The first-steps leg of ``precursor-oversized-updates``: updates this large before the policy could have
    learned anything are the learning rate's size, not a sharpened policy's tail."""
    step, w = last[-1][0], len(last)
    level = statistics.median(v for _, v in last)
    lr_now = dict(series(ctx, "lr")).get(step)
    low, high = th["early_impact_steps_low"], th["early_impact_steps_high"]
    by_count = over >= th["early_min_steps"]  # else the median leg: a few small updates among very large ones
    ev = [Evidence("train_step.policy_kl", round(level, 6),
                   th["early_kl_above"] if by_count else th["early_median_above"], (last[0][0], step),
                   f"median of the last {w} steps, {over} of them over {th['early_kl_above']:g}"
                   + ("" if by_count else f" (the median over {th['early_median_above']:g})")
                   + f", within the run's first {th['early_steps']:g} steps: nats per token each update moves the "
                   "policy (KL before || after, re-scored samples); a learning run moves it ~0.001-0.006 per step"),
          Evidence("expected time to impact", f"{low:g}-{high:g} steps", None, None,
                   "held-out success or the training reward fell this many steps after such first steps in "
                   "bench/early_warning.py's learning-rate runs (tiny-packed, lr 1.5e-3); a slower model can take "
                   "longer: `tiny` at lr 3e-3 degenerated 10-136 steps after (doctor_calib's tenth check)")]
    if lr_now is not None:
        ev.insert(1, Evidence("train_step.lr", lr_now, None, None, "the learning rate at the warning"))
    return Finding(
        rule=OVERSIZED, severity=Severity.WARNING,
        title=(f"early warning: {over} of the last {w} updates moved the policy > {th['early_kl_above']:g} "
               f"nats/token (median {level:.3g}"
               + ("" if by_count else f", over {th['early_median_above']:g}")
               + f") from the run's first steps (by step {step}); a learning-rate collapse expected within "
               f"{low:g}-{high:g} steps"),
        first_step=step, last_step=step, evidence=ev,
        root_cause=("the learning rate (or the warm-up's start) is too high for this model: from its first steps "
                    "every optimiser step moves the policy tens of times further than a run that learns, and "
                    "such a run learns a little, then is thrown off what it found"),
        confidence=0.6,
        remediation=["lower the learning rate (e.g. /3-/5) and restart, or resume from a checkpoint before the "
                     "warning",
                     "keep each update small: per-token policy KL per step around 1e-3 is where the healthy runs "
                     "of the bench sit (PPO's target_kl / early stopping bounds the same number)",
                     "rlobs doctor RUN --rule precursor-grad-norm-drift"])


HACKING = "precursor-reward-hacking"


def _divergence(reward: Series, held: Series, th: Mapping[str, float]) -> tuple[int, list[Evidence], str] | None:
    """The held-out leg: first evaluation at which the training reward's climb has left held-out success behind
    ``min_evals`` evaluations running (see ``reward_hacking``)."""
    n, need = int(th["smooth"]), int(th["min_evals"])
    if len(reward) < n or len(held) < need + 1:
        return None
    base = statistics.fmean(v for _, v in reward[:n])
    first_step, first = held[0]
    run: list[tuple[int, float, float]] = []
    for s, v in held[1:]:
        recent = [r for t, r in reward if t <= s][-n:]
        gain = statistics.fmean(recent) - base if len(recent) == n else 0.0
        run = [*run, (s, gain, v)] if gain >= th["reward_gain"] and v - first <= th["heldout_share"] * gain else []
        if len(run) < need:
            continue
        step, gain, v = run[-1]
        ev = [Evidence("train_step.reward_mean (gain over its early level)", round(gain, 4), th["reward_gain"],
                       (reward[0][0], step), f"mean of the {n} steps up to step {step} - {base:.4g}, the mean of "
                       f"the first {n}"),
              Evidence("held-out success (gain over the first evaluation)", round(v - first, 4),
                       round(th["heldout_share"] * gain, 4), (first_step, step),
                       f"{first:.3g} at step {first_step} -> {v:.3g} at step {step}; the bar is "
                       f"{th['heldout_share']:.2g} of the training reward's gain"),
              Evidence("evaluations running", len(run), need, (run[0][0], step),
                       "consecutive held-out evaluations with the training reward this far ahead")]
        return step, ev, (f"the training reward climbed {gain:+.2f} by step {step} while held-out success moved "
                          f"{v - first:+.2f} ({first:.2f} -> {v:.2f}), {len(run)} evaluations running")
    return None


def _audit(gap: Series, th: Mapping[str, float]) -> tuple[int, list[Evidence], str] | None:
    """The audit leg: first step at which the training reward's excess over the audit grader on the same samples
    (the mean of the last ``smooth`` steps) is over ``audit_above`` and ``audit_gain`` above its first ``smooth``
    steps, ``audit_steps`` steps running."""
    n, need = int(th["smooth"]), int(th["audit_steps"])
    if len(gap) < n:  # no early level yet (each step after it is judged on the steps up to it: online)
        return None
    base = statistics.fmean(v for _, v in gap[:n])
    running = 0
    for i in range(n - 1, len(gap)):
        level = statistics.fmean(v for _, v in gap[i - n + 1:i + 1])
        running = running + 1 if level >= th["audit_above"] and level - base >= th["audit_gain"] else 0
        if running < need:
            continue
        step = gap[i][0]
        ev = [Evidence("grader audit gap (training reward - audit grader, same samples)", round(level, 4),
                       th["audit_above"], (gap[i - n + 1][0], step),
                       f"mean of the last {n} steps: reward the exact check does not confirm"),
              Evidence("grader audit gap (rise over its early level)", round(level - base, 4), th["audit_gain"],
                       (gap[0][0], step), f"- {base:.3g}, the mean of the first {n} steps: the loophole's share grows "
                       "as the policy learns it (a shaped reward's partial credit shrinks)"),
              Evidence("steps running", running, need, (gap[i - running + 1][0], step), "")]
        return step, ev, (f"the training reward pays {level:.2f} more than the audit grader on the same samples by "
                          f"step {step} (up {level - base:+.2f} from the first {n} steps)")
    return None


@rule(HACKING, concern="early_warning", title="Early warning: reward hacking (training reward leaving held-out success behind)",
      needs=("train_step",), thresholds={})
def reward_hacking(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Early warning of reward hacking, two legs (the earlier one is reported):

    * held out: the training reward has climbed ``reward_gain`` (the mean of the last ``smooth`` steps against the
      mean of the first ``smooth``) while held-out success (exact-match on prompts the run never trains on) gained at
      most ``heldout_share`` of that over its first evaluation, at ``min_evals`` evaluations running. A run that
      learns gains held out what it gains in training; a reward that climbs alone pays for something that is not
      success. The training and held-out prompt mixes may differ: a run that learns the task and the loophole can
      pass this leg.
    * audit: on the training samples themselves, the training reward's excess over an audit grader (an exact check;
      trainer_ref's ``--audit-grader``, scalar ``grader_audit_gap``) is over ``audit_above`` and ``audit_gain`` above
      its first ``smooth`` steps, ``audit_steps`` steps running: a shaped reward's partial credit shrinks as the policy
      learns; a loophole's share grows.

    Insufficient data without held-out evaluations and without an audit. Thresholds: the failure table."""
    reward = series(ctx, "reward")
    held, gap = heldout(ctx), audit_gap(ctx)
    if not held and not gap:
        return Insufficient("no held-out evaluations (scalar rlobs/heldout_success or eval_reward_mean) and no "
                            "grader audit (scalar grader_audit_gap): without either a training reward that climbs "
                            "cannot be told from one that pays for a loophole")
    legs = [x for x in (_divergence(reward, held, th), _audit(gap, th)) if x is not None]
    if not legs:
        if len(gap) < int(th["smooth"]) and len(held) < int(th["min_evals"]) + 1:
            return Insufficient(f"{len(held)} held-out evaluations and {len(gap)} audited steps; the rule needs "
                                f"{int(th['min_evals']) + 1} or {int(th['smooth'])}")
        return []
    step, ev, what = min(legs, key=lambda x: x[0])
    return [Finding(
        rule=HACKING, severity=Severity.WARNING,
        title=(f"early warning: {what}: the reward pays for something held-out success does not measure "
               "(reward hacking)"),
        first_step=step, last_step=step,
        evidence=[*ev, Evidence("expected time to impact", "under way: every further step trains the loophole",
                                None, None, "in bench/early_warning.py's reward-hacking runs (a flawed grader) "
                                "held-out success mostly stalls instead of falling, and where it fell the fall did "
                                "not follow the held-out leg by a measurable lead: the warning is the finding")],
        root_cause=("the grader rewards something that is not success (a loophole: a format, shown work that is "
                    "never checked, a length) and the policy has learned it: the training reward keeps climbing "
                    "while an exact check (held out, or on the training samples themselves) does not follow; every "
                    "further step trains the loophole"),
        confidence=0.6,
        remediation=["audit the grader on the run's own samples: the rollouts the reward pays for that an exact "
                     "check fails (rlobs app: the run's rollouts beside their rewards); fix the loophole and resume "
                     "from a checkpoint before the warning",
                     "keep an exact check beside the training reward in every run: a held-out evaluation "
                     "(trainer_ref: --eval-every) and an audit of the training samples (--audit-grader exact)",
                     "until fixed: lower the learning rate or stop; the longer it trains, the more the policy "
                     "narrows onto the loophole"],
    )]


PRECURSOR_IDS: tuple[str, ...] = (*PRECURSORS, UNCORRECTED, OVERSIZED, HACKING)


def replay(ctx: RunContext, rule_ids: Sequence[str] | None = None,
           thresholds: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, int | None]:
    """First step each precursor rule warns on when the record is judged step by step as it grows (each
    step sees only the steps up to it). Equals each finding's ``first_step`` on the whole record: the
    detectors are online (``tests/early_warning/test_precursors.py`` checks it)."""
    from rlobs.doctor.model import registry

    rules = registry()
    ids = list(rule_ids or PRECURSOR_IDS)
    steps = sorted({s for s, _ in series(ctx, "reward")} | {s for s, _ in series(ctx, "grad_norm")}
                   | {s for s, _ in series(ctx, "ess")} | {s for s, _ in series(ctx, "policy_kl")})
    out: dict[str, int | None] = {rid: None for rid in ids}
    for step in steps:
        ctx.until_step = step  # type: ignore[attr-defined]
        try:
            for rid in ids:
                if out[rid] is not None:
                    continue
                th = {**rules[rid].thresholds, **(thresholds or {}).get(rid, {})}
                res = rules[rid].fn(ctx, th)
                if isinstance(res, list) and res:
                    out[rid] = step
        finally:
            ctx.until_step = None  # type: ignore[attr-defined]
    return out
