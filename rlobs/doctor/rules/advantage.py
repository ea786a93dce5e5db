"""Advantage-denominator rules: zero-std groups, near-zero std amplifying advantages, rank disagreement."""

from __future__ import annotations

import math
from collections.abc import Mapping

from rlobs.doctor.context import RunContext, runs_of
from rlobs.doctor.rules.aggregates import task_solved
from rlobs.doctor.model import (
    Evidence,
    Finding,
    Insufficient,
    RuleResult,
    Severity,
    rule,
)


def _per_step(ctx: RunContext, expr: str) -> list[tuple[int, float]]:
    return [(int(s), float(v)) for s, v in ctx.rows(
        f"SELECT step, {expr} AS v FROM advantage WHERE step IS NOT NULL{ctx.step_filter()} "
        "GROUP BY step HAVING v IS NOT NULL ORDER BY step")]


# a batch whose groups mostly carry no advantage concentrates the normalised loss on the few that vary: a
# grad-norm spike (and the reward drop of a constant grader) at the onset is a symptom of the same cause
@rule("advantage-zero-std-groups", concern="advantage", title="Most GRPO groups carry no signal (zero reward std)",
      needs=("advantage",), thresholds={"min_steps": 2, "baseline_steps": 20, "min_baseline_groups": 8,
                                          "rise_min_steps": 3, "rise_reward_share": 0.5},
      # ratio, min_share, solved_*: the failure table
      causes=("grad-norm-spike", "no-gradient"))
def zero_std(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Share of groups whose rewards are all equal >= ``ratio`` for ``min_steps`` consecutive steps, and the
    pooled share over those steps judged against its sample size: its Wilson lower bound (95 %, widened for
    the number of steps looked at) must clear ``min_share`` (the failure table's 0.7, chosen on the calibration
    runs, long ones included: "6 of 8 groups over 2 steps" has a lower bound of 0.27 in a 20-step record, not
    evidence of anything systemic; 32 of 32 has 0.78). Those groups have zero advantage, so their tokens are generated, graded and
    trained on for nothing. Without group counts in the record the per-step shares alone decide.

    Or a sudden rise against the run's own history, with fewer groups than the absolute bar needs (4
    groups a step: a grader that turned constant at step 8 gave 22 of 24 zero-std groups over 6 steps, lower
    bound 0.63): the pooled share over those steps against the share over up to ``baseline_steps`` steps
    before them (at least ``min_baseline_groups`` groups), one-sided Fisher exact test at the same corrected
    level, over at least ``rise_min_steps`` steps, while the mean reward over those steps fell to at most
    ``rise_reward_share`` of the baseline's: groups failing alike. A policy that solves its prompts also raises
    the share (all-correct groups), with its reward: that is not this. (Fourth pass: without the reward and
    length bars, 2-3-step bursts of a healthy 100-step run's natural share, 11 of 12 and 12 of 16 groups with
    the reward 0.17 -> 0.15 and 0.28 -> 0.24, passed the test; a constant grader takes the reward to ~0.)

    Groups that are all correct because the policy solved the task are not a failure: when those steps are a
    solved task (``task_solved``: training reward and held-out success both near 1, and close to each other) the
    finding is info. A grader that turned constant at 1 lifts the training reward but not held-out success, and
    stays a warning. SmolLM2 on its echo task reaches reward 1.0 in 5 steps; every group is then zero-std."""
    from rlobs.detect import wilson

    if not ctx.count("advantage"):
        return Insufficient("no advantage events")
    rows = [(int(s), float(v), k, n) for s, v, k, n in ctx.rows(
        "SELECT step, max(zero_std_ratio) AS v, sum(zero_std_groups), sum(groups) FROM advantage "
        f"WHERE step IS NOT NULL{ctx.step_filter()} GROUP BY step HAVING v IS NOT NULL ORDER BY step")]
    if not rows:
        return Insufficient("advantage events carry no zero_std_ratio")
    counts = {s: (float(k), float(n)) for s, _, k, n in rows if k is not None and n}
    # every step could start a run of high shares: the interval is widened for that many looks (Bonferroni),
    # so a 100-step run with a base rate of 50 % zero-std groups does not find a 6-step streak by chance
    conf = 1 - 0.05 / max(1, len(rows))
    hot = [s for s, v, _, _ in rows if v >= th["ratio"]]
    kept: list[tuple[int, int, float, tuple[float, float], int, int]] = []  # first, last, share, ci, k, n
    rises: list[str] = []
    for a, b in runs_of(hot, int(th["min_steps"])):
        steps = range(a, b + 1)
        if all(s in counts for s in steps):
            k = sum(counts[s][0] for s in steps)
            n = sum(counts[s][1] for s in steps)
            ci = wilson(k, n, conf)
            if ci[0] < th["min_share"]:
                rise = _sudden_rise(ctx, counts, a, b, k, n, 1 - conf, th)
                if rise is None:
                    continue  # too few groups to call it systemic, and no break from the run's own history
                rises.append(rise)
            kept.append((a, b, k / n, ci, int(k), int(n)))
        else:
            share = sum(v for s, v, _, _ in rows if a <= s <= b) / (b - a + 1)
            kept.append((a, b, share, (math.nan, math.nan), 0, 0))
    if not kept:
        return []
    first, last = kept[0][0], kept[-1][1]
    worst = max(v for s, v, _, _ in rows if first <= s <= last)
    k = sum(r[4] for r in kept)
    n = sum(r[5] for r in kept)
    ev = [Evidence("advantage.zero_std_ratio", round(worst, 4), th["ratio"], (first, last),
                   f"{sum(b - a + 1 for a, b, *_ in kept)} steps at or above the threshold")]
    if n:
        lo, hi = wilson(k, n, conf)
        ev.append(Evidence("zero-std groups / groups", f"{k}/{n} = {k / n:.2f} ({conf:.2%} CI {lo:.2f}-{hi:.2f}, "
                           f"corrected for {len(rows)} steps)",
                           th["min_share"], (first, last), "pooled over those steps; lower bound vs min_share"))
    ev.extend(Evidence("zero-std share vs the run's own history", r, 1 - conf, (first, last),
                       "a sudden rise while the reward fell (one-sided Fisher exact test)") for r in rises)
    title = f"{worst:.0%} of groups had identical rewards (zero std) over steps {first}-{last}" + (
        f" ({k} of {n} groups)" if n else "")
    solved, not_solved = task_solved(ctx, first, last, th)
    if not_solved is None:
        return [Finding(
            rule="advantage-zero-std-groups", severity=Severity.INFO,
            title=title + ": all correct, the task is solved", first_step=first, last_step=last,
            evidence=ev + solved,
            root_cause="the policy solves these prompts: every sample of a group earns the full reward, so the "
                       "groups carry no advantage and further steps teach little (held-out success agrees, so "
                       "the grader is not what turned constant)",
            confidence=0.5,
            remediation=["nothing is broken: stop here, or move to harder prompts (drop groups whose pass rate is "
                         "1: dynamic sampling / curriculum)"],
        )]
    return [Finding(
        rule="advantage-zero-std-groups", severity=Severity.WARNING,
        title=title, first_step=first, last_step=last,
        evidence=ev + solved,
        root_cause="the task is too easy or too hard for the current policy (all-correct or all-wrong groups), "
                   "or the grader returns a constant (check grader outcomes and rewards)"
                   f" (not a solved task: {not_solved})",
        confidence=0.7,
        remediation=["filter prompts by difficulty (drop groups whose pass rate is 0 or 1: dynamic sampling)",
                     "check the grader: rlobs doctor RUN --rule grader-timeouts",
                     "raise the group size G or the sampling temperature"],
    )]


def _sudden_rise(ctx: RunContext, counts: Mapping[int, tuple[float, float]], a: int, b: int, k: float, n: float,
                 alpha: float, th: Mapping[str, float]) -> str | None:
    """Evidence text when the zero-std share over steps a..b broke from the steps before it (Fisher exact,
    one-sided, p < ``alpha``) while the reward fell; None otherwise (or without a baseline to compare)."""
    from scipy.stats import fisher_exact

    if b - a + 1 < th["rise_min_steps"]:
        return None
    before = [s for s in sorted(counts) if s < a][-int(th["baseline_steps"]):]
    k0 = sum(counts[s][0] for s in before)
    n0 = sum(counts[s][1] for s in before)
    if n0 < th["min_baseline_groups"] or k / n <= k0 / n0:
        return None
    from rlobs.doctor.rules.precursors import series

    reward = dict(series(ctx, "reward"))  # per-step mean training reward, read once per diagnosis
    r_hot = [float(reward[s]) for s in range(a, b + 1) if s in reward]
    r_base = [float(reward[s]) for s in before if s in reward]
    if not r_hot or not r_base or sum(r_hot) / len(r_hot) > th["rise_reward_share"] * sum(r_base) / len(r_base):
        return None  # the reward held (or rose: solved prompts): not groups failing alike
    p = float(fisher_exact([[int(k), int(n - k)], [int(k0), int(n0 - k0)]], alternative="greater")[1])
    if p >= alpha:
        return None
    return (f"{int(k)}/{int(n)} = {k / n:.2f} over steps {a}-{b} vs {int(k0)}/{int(n0)} = {k0 / n0:.2f} over the "
            f"{len(before)} steps before (p = {p:.2g}); reward {sum(r_base) / len(r_base):.3g} -> "
            f"{sum(r_hot) / len(r_hot):.3g}")


@rule("advantage-denominator-collapse", concern="advantage",
      title="Near-zero group std amplifies advantages (or the denominator is NaN/zero)",
      needs=("advantage",), thresholds={"max_abs_advantage": 10.0},
      causes=("grad-norm-spike", "grad-norm-nonfinite"))
def denominator_collapse(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Groups with 0 < reward std < the probe's threshold (their float noise becomes full-strength
    advantage: warning), and critical when max |advantage| > ``max_abs_advantage`` (a group-normalised
    advantage of G samples is at most sqrt(G-1) in size unless the denominator broke) or any
    denominator is NaN/Inf/zero."""
    if not ctx.count("advantage"):
        return Insufficient("no advantage events")
    # a healthy group-normalised advantage reaches sqrt(G-1) (one success among G): scale the limit with G
    group = ctx.cfg("group_size", "num_generations", "n_samples_per_prompt", "rollout.n")
    if not isinstance(group, (int, float)) and ctx.count("rollout"):
        group = ctx.scalar("SELECT median(n) FROM (SELECT count(*) n FROM rollout WHERE group_id IS NOT NULL "
                           "GROUP BY group_id)")
    limit = max(th["max_abs_advantage"], 1.5 * math.sqrt(max(float(group or 1) - 1, 0)))
    th = {**th, "max_abs_advantage": limit}
    rows = ctx.rows("SELECT step, max(max_abs_advantage), sum(coalesce(nonfinite_denominators, 0)), "
                    "sum(coalesce(near_zero_std_groups, 0)), min(denom_min) FROM advantage "
                    f"WHERE step IS NOT NULL{ctx.step_filter()} GROUP BY step ORDER BY step")
    if not rows:
        return Insufficient("no advantage events with a step")
    def exploded(a: float | None, n: int | None) -> bool:
        return (a is not None and (a != a or a > th["max_abs_advantage"])) or (n or 0) > 0

    bad = [(int(s), a, n, nz, d) for s, a, n, nz, d in rows if exploded(a, n) or (nz or 0) > 0]
    if not bad:
        return []
    severity = Severity.CRITICAL if any(exploded(b[1], b[2]) for b in bad) else Severity.WARNING
    first, last = bad[0][0], bad[-1][0]
    worst = max((b for b in bad if b[1] is not None), key=lambda b: b[1] if b[1] == b[1] else float("inf"),
                default=bad[0])
    ev = [Evidence("advantage.max_abs_advantage", worst[1] if worst[1] is not None else "n/a",
                   th["max_abs_advantage"], (first, last))]
    nz = sum(b[3] for b in bad)
    if nz:
        ev.append(Evidence("advantage.near_zero_std_groups", nz, 0, (first, last), "groups with 0 < std < threshold"))
    nonfin = sum(b[2] for b in bad)
    if nonfin:
        ev.append(Evidence("advantage.nonfinite_denominators", nonfin, 0, (first, last)))
    if worst[4] is not None:
        ev.append(Evidence("advantage.denom_min", worst[4], None, (worst[0], worst[0]), "smallest std + eps"))
    return [Finding(
        rule="advantage-denominator-collapse", severity=severity,
        title=(f"advantage denominator collapsed at step {first}: max |advantage| {worst[1]:.3g}"
               if severity == Severity.CRITICAL and worst[1] is not None else
               f"{nz} group(s) with near-zero reward std from step {first}: noise amplified into advantage"),
        first_step=first, last_step=last, evidence=ev,
        root_cause="groups whose reward std is just above 0 (rewards almost equal, e.g. 1e-7 noise) divide by "
                   "std + eps with a tiny eps, multiplying advantages by orders of magnitude",
        confidence=0.9,
        remediation=["treat std < threshold as zero (zero advantage) instead of dividing by it",
                     "raise eps (e.g. 1e-4 -> 1e-2) or normalise by the batch std instead of the group std",
                     "check the reward function for float noise: round rewards before normalising"],
    )]


@rule("advantage-rank-disagreement", concern="advantage",
      title="Data-parallel ranks disagree on the loss-normalisation denominator",
      needs=("advantage",), causes=("grad-norm-spike",))
def rank_disagreement(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Any step where the probe saw ranks_agree = false: token-level loss normalisation used a different
    global token count on different ranks, so gradients are scaled inconsistently."""
    if not ctx.count("advantage"):
        return Insufficient("no advantage events")
    known = ctx.scalar(f"SELECT count(ranks_agree) FROM advantage WHERE true{ctx.step_filter()}")
    if not known:
        return Insufficient("advantage events carry no ranks_agree (single rank or the probe did not gather)")
    rows = ctx.rows("SELECT step, any_value(rank_denominators) FROM advantage WHERE ranks_agree = false"
                    f"{ctx.step_filter()} GROUP BY step ORDER BY step")
    if not rows:
        return []
    first, last = int(rows[0][0]), int(rows[-1][0])
    return [Finding(
        rule="advantage-rank-disagreement", severity=Severity.CRITICAL,
        title=f"ranks used different loss denominators on {len(rows)} step(s) from step {first}",
        first_step=first, last_step=last,
        evidence=[Evidence("advantage.rank_denominators", rows[0][1] or "?", "all equal", (first, last))],
        root_cause="each rank normalised by its local token count (or a stale all-reduce) instead of the "
                   "global count every rank must agree on",
        confidence=0.9,
        remediation=["all-reduce the token count before dividing the loss (sum over ranks, same value everywhere)",
                     "check gradient accumulation: the denominator must cover every micro-batch of the step"],
    )]
