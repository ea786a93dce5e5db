"""Rules on the per-step aggregates other trainers log (verl, TRL, OpenRLHF, AReaL, slime, NeMo-RL, prime-rl):
the grading share of a step, trainer / rollouter idle ratios, staleness growth from aggregate distributions and
stale-sample counts, generator/trainer parity from probability differences and KL estimators, the
response-length clip ratio, entropy collapse, and steps with no gradient.

Every rule compares a run with its own early steps (the median of the first ``baseline_frac`` of the steps,
at least ``baseline_min`` steps) and fires only on a sustained departure (``min_steps`` consecutive logged
steps) beyond both a relative and an absolute margin: a healthy run's noise and slow trends stay silent.
A rule without data says which metric would enable it in the run's framework (``ENABLE``).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence

from rlobs.catalogue import HELDOUT_SCALARS
from rlobs.doctor.context import RunContext, runs_of, finite
from rlobs.doctor.model import (
    Evidence,
    Finding,
    Insufficient,
    RuleResult,
    Severity,
    rule,
)

# rule -> framework -> the logged metric(s) that enable it ("" = that framework does not log one)
ENABLE: dict[str, dict[str, str]] = {
    "grading-dominates-step": {
        "verl": "timing_s/reward with timing_s/step", "trl": "", "openrlhf": "", "areal": "", "slime": "",
        "nemo-rl": "", "prime-rl": "", "rlobs": "phase(grading) events with train_step.step_seconds"},
    "trainer-idle": {
        "verl": "trainer/idle_ratio (fully_async)", "slime": "perf/wait_time_ratio", "trl": "",
        "openrlhf": "", "areal": "", "nemo-rl": "", "prime-rl": "",
        "rlobs": "a scalar rlobs/trainer_idle_ratio (or --map your idle-ratio name onto it)"},
    "staleness-growing": {
        "verl": "training/off_policy/trajectory_staleness/{max,mean} or fully_async/count/stale_samples_processed "
                "with fully_async/count/total_generated_samples",
        "prime-rl": "off_policy/{max,mean}", "trl": "", "openrlhf": "", "areal": "", "slime": "", "nemo-rl": "",
        "rlobs": "staleness events (max_staleness / mean_staleness)"},
    "parity-prob-drift": {
        "verl": "training/rollout_probs_diff_mean or rollout_corr/kl / rollout_corr/k3_kl",
        "openrlhf": "vllm_kl (vLLM IS correction on)", "nemo-rl": "train/gen_kl_error",
        "prime-rl": "mismatch_kl/all/mean", "areal": "ppo_actor/update/behave_approx_kl/avg",
        "slime": "train/train_rollout_logprob_abs_diff (judged by parity-drift)",
        "trl": "sampling/sampling_logp_difference/mean (judged by parity-drift)",
        "rlobs": "parity events (mean_abs_dprob, kl_k1, kl_k3)"},
    "response-length-clipped": {
        "verl": "response_length/clip_ratio", "trl": "completions/clipped_ratio", "slime": "rollout/truncated_ratio",
        "areal": "ppo_actor/no_eos_ratios/avg", "prime-rl": "is_truncated/mean", "openrlhf": "", "nemo-rl": "",
        "rlobs": "rollout_summary.truncated_ratio"},
    "entropy-collapse": {
        "verl": "actor/entropy", "trl": "entropy", "openrlhf": "entropy_loss", "slime": "train/entropy_loss",
        "areal": "ppo_actor/update/entropy/avg", "nemo-rl": "train/approx_entropy", "prime-rl": "entropy/all/mean",
        "rlobs": "train_step.entropy"},
    "no-gradient": {
        "verl": "actor/grad_norm", "trl": "grad_norm", "openrlhf": "grad_norm (not logged by upstream OpenRLHF)",
        "slime": "train/grad_norm", "areal": "ppo_actor/update/grad_norm", "nemo-rl": "train/grad_norm",
        "prime-rl": "optim/grad_norm", "rlobs": "train_step.grad_norm"},
}

_BASELINE = {"baseline_frac": 0.1, "baseline_min": 5}


def framework(ctx: RunContext) -> str:
    fw = ctx.cfg("framework")
    return fw if isinstance(fw, str) and fw != "generic" else "rlobs"


def missing(ctx: RunContext, rule_id: str, what: str) -> Insufficient:
    """``what`` is missing; name the metric that would provide it in this run's framework."""
    fw = framework(ctx)
    hint = ENABLE[rule_id].get(fw)
    if hint is None or fw == "rlobs":
        others = "; ".join(f"{k}: {v}" for k, v in ENABLE[rule_id].items() if v and k != "rlobs")
        return Insufficient(f"{what}; enabled by {ENABLE[rule_id]['rlobs']} ({others})")
    if not hint:
        return Insufficient(f"{what}; {fw} does not log a metric for it (rlobs: {ENABLE[rule_id]['rlobs']})")
    return Insufficient(f"{what}; in {fw} it comes from {hint}")


def per_step(ctx: RunContext, sql: str) -> list[tuple[int, float]]:
    """(step, value) from ``SELECT step, value ... GROUP BY step``: finite values only, step order."""
    return [(int(s), float(v)) for s, v in ctx.rows(sql) if s is not None and finite(v)]


def scalar_series(ctx: RunContext, name: str) -> list[tuple[int, float]]:
    if not ctx.count("scalar"):
        return []
    return per_step(ctx, f"SELECT step, avg(value) FROM scalar WHERE name = {_quote(name)} AND step IS NOT NULL "
                         f"AND isfinite(value){ctx.step_filter()} GROUP BY step ORDER BY step")


def scalar_rows(ctx: RunContext, names: Sequence[str]) -> list[tuple[int, float]]:
    """Per-step mean of the scalar events named in ``names`` (finite values, step order)."""
    if not ctx.count("scalar"):
        return []
    quoted = ", ".join(_quote(n) for n in names)
    return per_step(ctx, f"SELECT step, avg(value) FROM scalar WHERE name IN ({quoted}) AND step IS NOT NULL "
                         f"AND isfinite(value){ctx.step_filter()} GROUP BY step ORDER BY step")


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def baseline(series: Sequence[tuple[int, float]], th: Mapping[str, float]) -> tuple[float, int]:
    """Median of the first ``baseline_frac`` of the series (at least ``baseline_min`` points), and how many."""
    n = max(int(th["baseline_min"]), int(len(series) * th["baseline_frac"]))
    head = [v for _, v in series[:n]]
    return statistics.median(head), len(head)


def sustained(series: Sequence[tuple[int, float]], bad, min_steps: int, skip: int = 0) -> list[tuple[int, int]]:
    """(first, last) step of each run of at least ``min_steps`` consecutive *logged* points where ``bad(v)``,
    ignoring the first ``skip`` points (the baseline)."""
    out, start, count, prev = [], None, 0, None
    for i, (s, v) in enumerate(series):
        if i >= skip and bad(v):
            if start is None:
                start, count = s, 0
            count += 1
            prev = s
            continue
        if start is not None and count >= min_steps:
            out.append((start, prev))
        start, count = None, 0
    if start is not None and count >= min_steps:
        out.append((start, prev))
    return out


def _enough(series: Sequence[tuple[int, float]], th: Mapping[str, float]) -> bool:
    n = max(int(th["baseline_min"]), int(len(series) * th["baseline_frac"]))
    return len(series) >= n + int(th["min_steps"])


def _worst(series: Sequence[tuple[int, float]], first: int, last: int, low: bool = False) -> tuple[int, float]:
    inside = [(s, v) for s, v in series if first <= s <= last]
    return (min if low else max)(inside, key=lambda sv: sv[1])


# ---------------------------------------------------------------------------------------------------------
@rule("grading-dominates-step", concern="throughput", title="Reward / grading time dominates the step",
      needs=("phase", "train_step"), causes=("trainer-starved", "trainer-idle"),
      thresholds={"share": 0.4, "ratio": 2.0, "min_steps": 3, **_BASELINE})
def grading_share(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Per step, grading seconds / step seconds (verl: ``timing_s/reward`` / ``timing_s/step``; the trainer
    sits idle while the reward runs in a synchronous step). Warning when the share exceeds both ``share`` and
    ``ratio`` x the run's early share for ``min_steps`` consecutive steps."""
    if not ctx.count("phase") or not ctx.count("train_step"):
        return missing(ctx, "grading-dominates-step", "no grading phase durations with step times")
    series = per_step(ctx, "SELECT p.step, max(p.seconds) / max(t.step_seconds) FROM phase p JOIN train_step t "
                           "ON p.step = t.step WHERE p.phase = 'grading' AND t.step_seconds > 0 "
                           f"AND p.step IS NOT NULL{ctx.step_filter('p.step')} GROUP BY p.step ORDER BY p.step")
    if not _enough(series, th):
        return missing(ctx, "grading-dominates-step",
                       f"{len(series)} steps with both a grading time and a step time")
    base, n = baseline(series, th)
    limit = max(th["share"], th["ratio"] * base)
    runs = sustained(series, lambda v: v > limit, int(th["min_steps"]), skip=n)
    if not runs:
        return []
    first, last = runs[0][0], runs[-1][1]
    ws, wv = _worst(series, first, last)
    idle = [v for s, v in scalar_series(ctx, "rlobs/trainer_idle_ratio") if first <= s <= last]
    ev = [Evidence("grading share of the step", round(wv, 3), round(limit, 3), (first, last),
                   f"early share {base:.3g}; {sum(b - a + 1 for a, b in runs)} steps over")]
    if idle:
        ev.append(Evidence("trainer idle ratio over those steps", round(statistics.median(idle), 3)))
    return [Finding(
        rule="grading-dominates-step", severity=Severity.WARNING,
        title=f"grading took {wv:.0%} of step {ws} (early share {base:.0%}); steps {first}-{last}",
        first_step=first, last_step=last, evidence=ev,
        root_cause="the reward / grading stage became the bottleneck: a slow or overloaded grader (sandbox, "
                   "judge model, verifier) holds the step while the trainer's accelerators sit idle",
        confidence=0.6,
        remediation=["look at the grader's latency and error rate for those steps (timeouts, retries, queueing)",
                     "run rewards asynchronously / overlap them with generation, or add grader capacity",
                     "rlobs doctor RUN --rule grader-slow --rule trainer-starved"],
    )]


@rule("trainer-idle", concern="throughput", title="Trainer idles waiting for samples (async idle ratio)",
      needs=("scalar",), thresholds={"idle": 0.5, "ratio": 2.0, "min_steps": 3, **_BASELINE})
def trainer_idle(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """``rlobs/trainer_idle_ratio`` (verl fully_async ``trainer/idle_ratio`` = generation wait / step time,
    slime ``perf/wait_time_ratio``) above both ``idle`` and ``ratio`` x its early value for ``min_steps``
    consecutive steps. The rollouter's idle ratio over the same steps tells which side is the bottleneck."""
    series = scalar_series(ctx, "rlobs/trainer_idle_ratio")
    if not _enough(series, th):
        return missing(ctx, "trainer-idle", f"{len(series)} steps with a trainer idle ratio")
    base, n = baseline(series, th)
    limit = max(th["idle"], th["ratio"] * base)
    runs = sustained(series, lambda v: v > limit, int(th["min_steps"]), skip=n)
    if not runs:
        return []
    first, last = runs[0][0], runs[-1][1]
    ws, wv = _worst(series, first, last)
    roll = [v for s, v in scalar_series(ctx, "rlobs/rollouter_idle_ratio") if first <= s <= last]
    ev = [Evidence("trainer idle ratio", round(wv, 3), round(limit, 3), (first, last), f"early {base:.3g}")]
    cause = ("the generator side cannot keep up: slow generation or grading, samples dropped as stale, or "
             "weight-sync bubbles")
    if roll:
        r = statistics.median(roll)
        ev.append(Evidence("rollouter idle ratio over those steps", round(r, 3)))
        if r > 0.3:
            cause = ("both sides wait: the rollouter is throttled (staleness bound, queue full, paused for weight "
                     "sync) while the trainer waits for samples; look at the sync and the queue")
    return [Finding(
        rule="trainer-idle", severity=Severity.WARNING,
        title=f"trainer idle {wv:.0%} of step {ws} (early {base:.0%}); steps {first}-{last}",
        first_step=first, last_step=last, evidence=ev, root_cause=cause, confidence=0.5,
        remediation=["compare generation and grading time per step with the trainer's update time",
                     "add rollout capacity or raise the staleness allowance (async)",
                     "rlobs doctor RUN --rule grading-dominates-step --rule weight-sync-slow"],
    )]


@rule("staleness-growing", concern="staleness", title="Sample staleness grows during the run",
      needs=("staleness", "scalar"), causes=("parity-prob-drift", "grad-norm-spike"),
      thresholds={"rise_versions": 1.0, "rise_share": 0.3, "min_steps": 3, **_BASELINE})
def staleness_growing(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Aggregate staleness (mean versions behind, from ``staleness.mean_staleness`` or, without it,
    ``max_staleness``) more than ``rise_versions`` above its early median for ``min_steps`` consecutive
    steps; without staleness distributions, the share of consumed samples that were stale (verl's cumulative
    ``stale_samples_processed`` over ``total_generated_samples``, per step) more than ``rise_share`` above its
    early median; never while it stays within the run's configured ``max_staleness`` (the bound holds it there;
    over it, ``staleness-over-bound`` reports). Under trainer_ref's completion basis (``staleness.staleness_basis``)
    the staleness is the one its bound is checked on, from the group's newest token version: a group resumed across
    weight syncs keeps older first tokens by design, and their dispatch staleness swings with how many are resumed."""
    from rlobs.doctor.rules.staleness import completion_staleness_per_step, configured_bound, staleness_basis

    series: list[tuple[int, float]] = []
    label = ""
    if staleness_basis(ctx) == "completion":
        series = [(s, mean) for s, _, mean in completion_staleness_per_step(ctx)]
        label = "mean staleness from the group's newest token version (the bound's completion basis)"
        if not series:
            return missing(ctx, "staleness-growing", "the completion basis without rollout token versions")
    if not series and ctx.count("staleness"):
        for col in ("mean_staleness", "max_staleness"):
            series = per_step(ctx, f"SELECT step, max({col}) FROM staleness WHERE step IS NOT NULL"
                                   f"{ctx.step_filter()} GROUP BY step ORDER BY step")
            if series:
                label = f"staleness.{col}"
                break
    rise, versions = th["rise_versions"], True
    if not series:
        stale = dict(scalar_series(ctx, "rlobs/stale_samples_total"))
        gen = dict(scalar_series(ctx, "rlobs/generated_samples_total"))
        steps = sorted(set(stale) & set(gen))
        for a, b in itertools.pairwise(steps):
            dg = gen[b] - gen[a]
            if dg > 0:
                series.append((b, max(0.0, min(1.0, (stale[b] - stale[a]) / dg))))
        label, rise, versions = "share of new samples consumed stale", th["rise_share"], False
    if not _enough(series, th):
        return missing(ctx, "staleness-growing", f"{len(series)} steps with aggregate staleness or stale counts")
    base, n = baseline(series, th)
    limit = base + rise
    runs = sustained(series, lambda v: v > limit, int(th["min_steps"]), skip=n)
    if not runs:
        return []
    first, last = runs[0][0], runs[-1][1]
    if _over_bound(ctx, first, last):
        return []  # staleness-over-bound reports it, with the bound
    ws, wv = _worst(series, first, last)
    # Within the configured bound: the lag the run allows, held there by the bound (samples past it are dropped,
    # which the ledger rules report). A bound of 2 with early steps near 1 put a healthy run whose trainer is the
    # slower side one noisy stretch at the bound from a warning (2 DP ranks, thirty-ninth early-warning run)
    bound = configured_bound(ctx) if versions else None  # a share of stale samples is not in versions
    if bound is not None and wv <= bound:
        return []
    return [Finding(
        rule="staleness-growing", severity=Severity.WARNING,
        title=f"{label} rose to {wv:.3g} at step {ws} (early {base:.3g}); steps {first}-{last}",
        first_step=first, last_step=last,
        evidence=[Evidence(label, round(wv, 4), round(limit, 4), (first, last), f"early median {base:.3g}")],
        root_cause="the generator runs further and further ahead of the trainer (or samples wait longer in the "
                   "queue): the trainer is slower than generation, or the staleness bound is not enforced",
        confidence=0.5,
        remediation=["bound staleness (max version lag) and drop or re-weight older samples",
                     "rlobs doctor RUN --rule staleness-over-bound --rule parity-prob-drift"],
    )]


def _over_bound(ctx: RunContext, first: int, last: int) -> bool:
    """staleness-over-bound fires on these steps (its default limit, or the configured bound)."""
    from rlobs.doctor.model import registry
    from rlobs.doctor.rules.staleness import bounded_staleness_per_step, configured_bound

    warn = registry()["staleness-over-bound"].thresholds["warn_versions"]
    bound = configured_bound(ctx)
    limit = bound if bound is not None and bound <= warn else warn
    return any(v > limit for s, v in bounded_staleness_per_step(ctx) if s >= first)


_PARITY = (  # column, absolute floor above the early median
    ("mean_abs_dprob", 0.002), ("kl_k3", 2e-4), ("kl_k1", 2e-4), ("kl_k2", 2e-4))


@rule("parity-prob-drift", concern="parity", title="Generator/trainer probability gap jumps and stays high",
      needs=("parity",), causes=("grad-norm-spike",),
      thresholds={"ratio": 2.5, "min_steps": 3, **_BASELINE})
def parity_prob_drift(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """The parity aggregates frameworks log without log-prob thresholds of their own: mean |p_rollout -
    p_train| (verl ``training/rollout_probs_diff_mean``) or a KL estimator between generator and trainer
    (verl ``rollout_corr/kl``/``k3_kl``, OpenRLHF ``vllm_kl``, NeMo-RL ``gen_kl_error``, prime-rl
    ``mismatch_kl``, AReaL ``behave_approx_kl``). Warning when it exceeds ``ratio`` x its early median and
    that median plus an absolute floor (0.002 for probabilities, 2e-4 nats for KL) for ``min_steps``
    consecutive steps: a jump that stays, typically from a weight update (a bad sync, a cache not reset).
    A run with log-prob differences (``mean_abs_dlogp``) is left to parity-drift."""
    if not ctx.count("parity"):
        return missing(ctx, "parity-prob-drift", "no parity events")
    dlogp = ctx.scalar("SELECT count(mean_abs_dlogp) FROM parity WHERE isfinite(mean_abs_dlogp)")
    if dlogp:
        return Insufficient(f"the run has log-prob differences ({dlogp} parity events with mean_abs_dlogp): "
                            "parity-drift judges them with field thresholds")
    findings: list[Finding] = []
    seen_any = False
    for col, floor in _PARITY:
        series = per_step(ctx, f"SELECT step, max({col}) FROM parity WHERE step IS NOT NULL AND isfinite({col})"
                               f"{ctx.step_filter()} GROUP BY step ORDER BY step")
        if not series:
            continue
        seen_any = True
        if not _enough(series, th):
            continue
        base, n = baseline(series, th)
        limit = max(th["ratio"] * base, base + floor)
        runs = sustained(series, lambda v, lim=limit: v > lim, int(th["min_steps"]), skip=n)
        if not runs:
            continue
        first, last = runs[0][0], runs[-1][1]
        ws, wv = _worst(series, first, last)
        syncs = ctx.rows(f"SELECT min(step) FROM weight_sync WHERE step BETWEEN {first - 2} AND {first}") \
            if ctx.count("weight_sync") else []
        after_sync = bool(syncs and syncs[0][0] is not None)
        findings.append(Finding(
            rule="parity-prob-drift", severity=Severity.WARNING,
            title=f"parity.{col} jumped to {wv:.3g} at step {ws} (early {base:.3g}) and stayed over "
                  f"{limit:.3g} for steps {first}-{last}",
            first_step=first, last_step=last,
            evidence=[Evidence(f"parity.{col}", round(wv, 6), round(limit, 6), (first, last),
                               f"early median {base:.3g}" + ("; a weight update just before the jump"
                                                             if after_sync else ""))],
            root_cause="the generator now samples from a different distribution than the trainer scores: after a "
                       "weight update suspect the sync (a tensor not updated, a wrong dtype) or a prefix cache "
                       "that was not reset; a slow rise points at staleness or precision",
            confidence=0.5,
            remediation=["rlobs doctor RUN --rule weight-sync-fingerprint-mismatch --rule weight-sync-cache-not-reset",
                         "compare generator and trainer log-probs on one batch right after a sync",
                         "enable importance-sampling correction (TIS / rollout_corr) while investigating"],
        ))
        break  # one finding per run: the first field that shows it
    if not seen_any:
        return missing(ctx, "parity-prob-drift", "parity events carry no probability difference or KL estimate")
    return findings


@rule("response-length-clipped", concern="rollout", title="Many responses hit the length limit",
      needs=("rollout_summary",), thresholds={"warn": 0.2, "rise": 0.1, "min_steps": 3, **_BASELINE})
def response_clipped(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """The share of responses cut at the maximum length (verl ``response_length/clip_ratio``, TRL
    ``completions/clipped_ratio``, ...) above both ``warn`` and its early median + ``rise`` for ``min_steps``
    consecutive steps: truncated responses get no (or a wrong) reward and teach the model nothing, and
    a rising share often comes with repetition loops or runaway length."""
    if not ctx.count("rollout_summary"):
        return missing(ctx, "response-length-clipped", "no rollout_summary events")
    series = per_step(ctx, "SELECT step, max(truncated_ratio) FROM rollout_summary WHERE step IS NOT NULL"
                           f"{ctx.step_filter()} GROUP BY step ORDER BY step")
    if not _enough(series, th):
        return missing(ctx, "response-length-clipped", f"{len(series)} steps with a truncated / clip ratio")
    base, n = baseline(series, th)
    limit = max(th["warn"], base + th["rise"])
    runs = sustained(series, lambda v: v > limit, int(th["min_steps"]), skip=n)
    if not runs:
        return []
    first, last = runs[0][0], runs[-1][1]
    ws, wv = _worst(series, first, last)
    lengths = per_step(ctx, "SELECT step, max(completion_tokens_mean) FROM rollout_summary WHERE step BETWEEN "
                            f"{first} AND {last} GROUP BY step ORDER BY step")
    ev = [Evidence("rollout_summary.truncated_ratio", round(wv, 3), round(limit, 3), (first, last),
                   f"early median {base:.3g}")]
    if lengths:
        ev.append(Evidence("mean completion tokens over those steps", round(statistics.median(v for _, v in lengths), 1)))
    return [Finding(
        rule="response-length-clipped", severity=Severity.WARNING,
        title=f"{wv:.0%} of responses hit the length limit at step {ws} (early {base:.0%}); steps {first}-{last}",
        first_step=first, last_step=last, evidence=ev,
        root_cause="responses run into the maximum length: runaway length growth (length reward hacking, "
                   "repetition loops) or a limit too small for the task",
        confidence=0.5,
        remediation=["read a few clipped completions (repetition? unfinished reasoning?)",
                     "add an overlong penalty / soft length punishment, or raise the limit",
                     "rlobs doctor RUN --rule entropy-collapse"],
    )]


@rule("entropy-collapse", concern="policy", title="Policy entropy collapses",
      needs=("train_step",), thresholds={"ratio": 0.2, "min_base": 0.05, "min_steps": 5, **_BASELINE,
                                         "held_window": 20, "held_gain": 0.2, "held_share": 0.75, "solved": 0.6,
                                         "heldout_drop": 0.15})  # solved_*: the failure table
def entropy_collapse(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Mean token entropy below ``ratio`` x its early median (which must exceed ``min_base``) for
    ``min_steps`` consecutive steps: the policy became nearly deterministic, exploration stopped and the
    group rewards stop varying (zero-std groups, no gradient).

    A run that *converged* gets the same finding as info, not a warning: from the first collapsed step to the
    last step judged, the training reward's ``held_window``-step mean stayed ``held_gain`` over its early median,
    at least ``held_share`` of its best so far and at least ``solved`` (a reward bounded in [0, 1]: the policy
    solves most training prompts, little is left to explore), and held-out success, where evaluated in that
    stretch, stayed within ``heldout_drop`` of its best (medians of 3 evaluations). Long healthy runs end this
    way (tiny-packed: entropy 0.95 -> 0.03 while held-out success holds at 0.8-0.9); a collapse that costs reward
    or held-out success, or a reward without a known ceiling, stays a warning. The two level legs (``held_gain``
    over the early median, ``solved``) also pass on the collapsed steps' own mean (up to ``held_window`` of them, at
    least ``min_steps``): a run that converges within the window is still climbing at its first collapsed steps, and
    a window reaching back before them reads the climb (healthy-async-nois-s65, fifty-eighth early-warning run);
    only where the run climbed into the collapse (the window at the first collapsed step its highest so far).

    A run too short for that window, or near its ceiling from the start (no room for ``held_gain``), converged too
    when the collapsed steps are a solved task (``task_solved``: training reward and held-out success both near 1).
    SmolLM2 on its echo task goes 0.83 -> 1.0 in 5 steps, and its entropy 0.41 -> 0.005 with it."""
    if not ctx.count("train_step"):
        return missing(ctx, "entropy-collapse", "no train_step events")
    series = per_step(ctx, "SELECT step, avg(entropy) FROM train_step WHERE step IS NOT NULL AND isfinite(entropy)"
                           f"{ctx.step_filter()} GROUP BY step ORDER BY step")
    if not _enough(series, th):
        return missing(ctx, "entropy-collapse", f"{len(series)} steps with an entropy")
    base, n = baseline(series, th)
    if base <= th["min_base"]:
        return []
    limit = th["ratio"] * base
    runs = sustained(series, lambda v: v < limit, int(th["min_steps"]), skip=n)
    if not runs:
        return []
    first, last = runs[0][0], runs[-1][1]
    ws, wv = _worst(series, first, last, low=True)
    ev = [Evidence("train_step.entropy", round(wv, 4), round(limit, 4), (first, last), f"early median {base:.3g}")]
    held, why, no_room = _reward_held(ctx, series[n - 1][0], first, th)
    if why is not None and no_room:  # too short or too near its ceiling to judge by the window: nothing fell
        solved, not_solved = task_solved(ctx, first, last, th)
        if not_solved is None:
            held, why = solved, None
        else:
            why += f"; nor is it a solved task: {not_solved}"
    ev += held
    title = f"entropy fell to {wv:.3g} at step {ws} ({wv / base:.0%} of its early {base:.3g}); steps {first}-{last}"
    if why is None:
        return [Finding(
            rule="entropy-collapse", severity=Severity.INFO,
            title=title + ", while the reward held near its ceiling (converged: little exploration left)",
            first_step=first, last_step=last, evidence=ev,
            root_cause="the policy became nearly deterministic after it learned the task: the training reward (and "
                       "held-out success, where evaluated) stayed at its best. The normal end of a run on a task it "
                       "solves; groups turn zero-std, so further steps teach little",
            confidence=0.5,
            remediation=["nothing is broken: stop here, or give it harder prompts to keep learning",
                         "to keep exploring: clip-higher (asymmetric epsilon), a small entropy bonus or a higher "
                         "sampling temperature"],
        )]
    return [Finding(
        rule="entropy-collapse", severity=Severity.WARNING, title=title,
        first_step=first, last_step=last, evidence=ev,
        root_cause="the policy collapsed onto a few outputs: too high a learning rate or too little "
                   "regularisation, clipping that only lets probabilities rise (clip-higher off), or a reward "
                   "that one answer style maximises" + (f" (not a convergence: {why})" if why else ""),
        confidence=0.5,
        remediation=["lower the learning rate; use clip-higher (asymmetric epsilon) or an entropy bonus",
                     "rlobs doctor RUN --rule advantage-zero-std-groups --rule no-gradient"],
    )]


def _training_reward(ctx: RunContext) -> list[tuple[int, float]]:
    """The per-step mean training reward (finite, step order)."""
    return per_step(ctx, "SELECT step, avg(reward_mean) FROM train_step WHERE step IS NOT NULL AND "
                         f"isfinite(reward_mean){ctx.step_filter()} GROUP BY step ORDER BY step")


def task_solved(ctx: RunContext, first: int, last: int,
                th: Mapping[str, float]) -> tuple[list[Evidence], str | None]:
    """Whether steps ``first``..``last`` are a task the policy solved rather than a failure: the training reward
    (bounded in [0, 1]) stayed at least ``solved_reward`` over them (its lowest ``solved_window``-step mean, or the
    mean of all of them if fewer), and the held-out evaluations of those steps (at steps ``first``..``last``, or
    else the first one after them; one is needed) were each at least ``solved_heldout`` and within ``solved_gap``
    of the training reward's mean over the steps.

    The held-out leg is what tells a solved task from a broken grader: a grader that turned constant at 1 (or a
    loophole) lifts the training reward, not held-out success, which trainer_ref grades with an exact check on
    prompts it never trains on. Without held-out success in the record nothing counts as solved. Returns the
    evidence, and None if solved or the reason it is not."""
    reward = _training_reward(ctx)
    inside = [v for s, v in reward if first <= s <= last]
    if not inside:
        return [], "no training reward over those steps"
    if min(v for _, v in reward) < 0.0 or max(v for _, v in reward) > 1.0:
        return [], "the reward is not bounded in [0, 1]"
    m = statistics.fmean(inside)
    k = min(len(inside), int(th["solved_window"]))
    low_mean = min(statistics.fmean(inside[i:i + k]) for i in range(len(inside) - k + 1))
    floor = max(th["solved_heldout"], m - th["solved_gap"])
    ev = [Evidence(f"train_step.reward_mean (lowest {k}-step mean over the steps)", round(low_mean, 4),
                   f">= {th['solved_reward']:g}", (first, last), f"{len(inside)} steps, mean {m:.3g}")]
    evals = scalar_rows(ctx, HELDOUT_SCALARS)
    held = [(s, v) for s, v in evals if first <= s <= last] or [(s, v) for s, v in evals if s > last][:1]
    if held:
        low = min(held, key=lambda sv: sv[1])
        ev.append(Evidence("held-out success (lowest evaluation of those steps)", round(low[1], 4),
                           f">= max({th['solved_heldout']:g}, training reward {m:.3g} - {th['solved_gap']:g}) = "
                           f"{floor:.3g}", (held[0][0], held[-1][0]),
                           f"{len(held)} evaluations; the task's exact check"))
    if low_mean < th["solved_reward"]:
        return ev, (f"the training reward's lowest {k}-step mean over steps {first}-{last} was {low_mean:.3g}, "
                    f"under {th['solved_reward']:g}")
    if not held:
        return ev, "no held-out success evaluated in or after those steps, to tell a solved task from a broken grader"
    if low[1] < floor:
        return ev, (f"held-out success was {low[1]:.3g} at step {low[0]}, under {floor:.3g} (the training reward "
                    f"{m:.3g} is not matched off the training prompts)")
    return ev, None


def _reward_held(ctx: RunContext, base_last: int, first: int,
                 th: Mapping[str, float]) -> tuple[list[Evidence], str | None, bool]:
    """Whether the run converged rather than collapsed (see ``entropy_collapse``): evidence, None if it did or the
    reason it did not, and whether that reason is only a lack of room to judge (the run too short for the window,
    or its reward too near its ceiling from the start to gain ``held_gain``): nothing fell."""
    reward = _training_reward(ctx)
    w = int(th["held_window"])
    early = [v for s, v in reward if s <= base_last]
    after = [i for i, (s, _) in enumerate(reward) if s >= first]
    if not early or not after or after[0] < w - 1 or len(after) < int(th["min_steps"]):
        return [], "no training reward over the early and the collapsed steps", True
    e0 = statistics.median(early)
    k, c0 = int(th["min_steps"]), after[0]

    def collapsed(i: int) -> float:
        """The reward's mean over the collapsed steps alone up to reward[i] (at most ``w``, at least the first
        ``k`` of them): the level legs' second reading, for a window that reaches back before the collapse."""
        lo = max(c0, i - w + 1)
        return statistics.fmean(v for _, v in (reward[lo:i + 1] if i + 1 - lo >= k else reward[c0:c0 + k]))

    roll = [(i, reward[i][0], statistics.fmean(v for _, v in reward[i - w + 1:i + 1]))
            for i in range(w - 1, len(reward))]
    # the run climbed into the collapse: the window at its first collapsed step is the highest it has been
    before = [m for _, s, m in roll if s < first]
    climbed = next(m for _, s, m in roll if s >= first) >= max(before, default=float("-inf"))
    peak, worst, low_c, why, fell = float("-inf"), None, None, None, False
    for i, s, m in roll:
        peak = max(peak, m)
        if s < first:
            continue
        # where the run climbed into the collapse, the level legs (its ceiling, its gain over the early steps) read
        # the window or the collapsed steps alone, whichever is higher: a run that converges within the window holds
        # its climb in the window (healthy-async-nois-s65, fifty-eighth early-warning run: reward 0.29 -> 0.8-0.95,
        # entropy under 20 % of its start from step 49, the window at 49 0.58 and its highest yet, the collapsed
        # steps' 0.74). A window lower than before holds a fall, not a climb (kl-blow-up-s167: 0.54 at its first
        # collapsed step, 0.59 before it, its reward fell at 28): the window alone, as a fall from the best always is
        mc = collapsed(i) if climbed else m
        level = max(m, mc)
        drop = (m < th["held_share"] * peak and f"its {w}-step mean fell to {m:.3g} at step {s}, under "
                f"{th['held_share']:.0%} of its best {peak:.3g}") or (
                level < th["solved"] and f"its {w}-step mean {m:.3g} at step {s} is under {th['solved']:g}")
        short = (level < e0 + th["held_gain"] and f"its {w}-step mean {m:.3g} at step {s} is within "
                 f"{th['held_gain']:g} of its early {e0:.3g}") or drop
        fell = fell or bool(drop)
        if worst is None or m < worst[1]:
            worst = (s, m)
        if low_c is None or mc < low_c[1]:
            low_c = (s, mc)
        if short and why is None:
            why = "the training reward did not hold: " + short
    ev = [Evidence(f"train_step.reward_mean ({w}-step mean, lowest from step {first})", round(worst[1], 4),
                   f">= max({e0 + th['held_gain']:.3g}, {th['held_share']:.0%} of its best, {th['solved']:g})",
                   (first, roll[-1][0]), f"early median {e0:.3g}")]
    if climbed and worst[1] < max(e0 + th["held_gain"], th["solved"]):  # the level legs read the collapsed steps
        ev.append(Evidence(f"train_step.reward_mean (the collapsed steps' own mean, up to {w}, lowest from step "
                           f"{first})", round(low_c[1], 4), f">= max({e0 + th['held_gain']:.3g}, {th['solved']:g})",
                           (first, roll[-1][0]), f"the {w}-step window reaches back before step {first}"))
    values = [v for _, v in reward]
    if min(values) < 0.0 or max(values) > 1.0:
        fell = True  # no known ceiling: not a lack of room
        why = why or "the reward is not bounded in [0, 1], so how near its ceiling it stayed is unknown"
    held = scalar_rows(ctx, HELDOUT_SCALARS)
    if len(held) >= 3 and held[-1][0] >= first:
        smooth = [(held[i][0], statistics.median(v for _, v in held[i - 2:i + 1])) for i in range(2, len(held))]
        best, low = float("-inf"), None
        for s, m in smooth:
            best = max(best, m)
            if s >= first and m < best - th["heldout_drop"] and low is None:
                low = (s, m, best)
        last_s, last_m = smooth[-1]
        ev.append(Evidence("held-out success (median of 3 evaluations)", round(low[1] if low else last_m, 4),
                           f">= best - {th['heldout_drop']:g}", (first, last_s),
                           f"best {max(m for _, m in smooth):.3g}"))
        if low:
            fell = True
            why = why or f"held-out success fell to {low[1]:.3g} at step {low[0]} from its best {low[2]:.3g}"
    return ev, why, not fell


@rule("no-gradient", concern="grad_norm", title="Steps with no gradient (update did nothing)",
      needs=("train_step",), thresholds={"eps": 1e-10, "min_steps": 2})
def no_gradient(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Global grad norm <= ``eps`` on ``min_steps`` consecutive logged steps: every advantage was zero (all
    groups zero-std, everything filtered) or every token was masked, so the optimiser step changed nothing."""
    if not ctx.count("train_step"):
        return missing(ctx, "no-gradient", "no train_step events")
    series = per_step(ctx, "SELECT step, max(grad_norm) FROM train_step WHERE step IS NOT NULL AND isfinite(grad_norm)"
                           f"{ctx.step_filter()} GROUP BY step ORDER BY step")
    if not series:
        return missing(ctx, "no-gradient", "no train_step events with grad_norm")
    runs = sustained(series, lambda v: abs(v) <= th["eps"], int(th["min_steps"]))
    if not runs:
        return []
    first, last = runs[0][0], runs[-1][1]
    zero_steps = [s for s, v in series if abs(v) <= th["eps"]]
    total = len(zero_steps)
    # a step whose every group had zero reward std has no gradient by construction (GRPO): expected, info;
    # the advantage-zero-std-groups rule judges whether that share is systemic
    all_zero_std = set()
    if ctx.count("advantage"):
        all_zero_std = {int(s) for (s,) in ctx.rows("SELECT step FROM advantage WHERE step IS NOT NULL GROUP BY step "
                                                    "HAVING min(zero_std_ratio) >= 1.0")}
    unexplained = [s for s in zero_steps if s not in all_zero_std]
    logged = [s for s, _ in series]
    pos = {s: i for i, s in enumerate(logged)}  # consecutive *logged* steps, as the rule counts them
    sev = Severity.WARNING if runs_of([pos[s] for s in unexplained], int(th["min_steps"])) else Severity.INFO
    return [Finding(
        rule="no-gradient", severity=sev,
        title=f"grad norm 0 on {total} step(s), first at step {first}"
              + ("" if unexplained else " (every group of those steps had zero reward std: no signal, no gradient)"),
        first_step=first, last_step=last,
        evidence=[Evidence("train_step.grad_norm", 0.0, f"> {th['eps']}", (first, last), f"{total} steps"),
                  Evidence("steps not explained by all-zero-std groups", len(unexplained), 0, None,
                           ", ".join(str(s) for s in unexplained[:10]))],
        root_cause="the loss had no gradient: all advantages zero (every group scored identically, or dynamic "
                   "sampling filtered everything), a loss mask that excludes every token, or frozen parameters",
        confidence=0.6,
        remediation=["rlobs doctor RUN --rule advantage-zero-std-groups --rule entropy-collapse",
                     "check the reward distribution per group and the loss mask on one batch"],
    )]
