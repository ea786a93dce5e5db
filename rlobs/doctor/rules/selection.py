"""Selection bias: what admission control threw away vs what the trainer learned from."""

from __future__ import annotations

import math
from collections.abc import Mapping

from rlobs.doctor.context import RunContext
from rlobs.doctor.model import (
    Evidence,
    Finding,
    Insufficient,
    RuleResult,
    Severity,
    rule,
)


def _z(a: tuple[float, float, int], b: tuple[float, float, int], floor: float) -> float:
    """Welch z of mean(a) - mean(b), the standard error floored (two constant samples are not infinite evidence)."""
    se = math.sqrt(a[1] / max(a[2], 1) + b[1] / max(b[2], 1))
    return (a[0] - b[0]) / max(se, floor)


@rule("selection-bias", concern="ledger", title="Admission control reshapes the training distribution",
      needs=("ledger",), thresholds={"length_ratio": 1.5, "reward_gap": 0.25, "min_drop_share": 0.1,
                                     "min_samples": 20, "z": 4.0, "warn_drop_share": 0.5})
def selection_bias(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Per drop reason (staleness, TTL, truncation, zero advantage, ...), the dropped samples' completion
    length and reward against the consumed ones'. A finding when a reason drops at least ``min_drop_share``
    of the samples (Wilson lower bound) and ``min_samples`` of them, and their mean length differs by
    ``length_ratio``x (either way) or their mean reward by ``reward_gap``, with a Welch z > ``z``: the
    trainer then learns from a batch that is not the policy's distribution (e.g. long answers are the
    slow ones, and the slow ones go stale). Lengths come from the ledger's ``tokens``, else the rollouts'
    ``completion_tokens``; rewards from grader calls.

    Severity from impact. A length bias from staleness drops is what a bounded-staleness async trainer does
    on any workload whose long answers take longer (every separate_async run of the calibration at
    max_staleness 2 drops 20-30 % of its samples, 2-4x longer than the consumed ones): it is reported as
    info, with the dropped/consumed length ratio, the drop share and the share of generated tokens thrown
    away as evidence (tokens/s, not samples/s, is the throughput that counts). It is a warning when it
    changes what the gradient is estimated from: the dropped samples' reward differs from the consumed ones'
    (by ``reward_gap``, Welch z > ``z``: the batch's reward distribution is not the policy's), or most of the
    samples are dropped (drop share's 95 % lower bound >= ``warn_drop_share``: the trainer learns from a
    minority of what was generated)."""
    from rlobs.detect import wilson

    if not ctx.count("ledger"):
        return Insufficient("no ledger events")
    has_roll = ctx.count("rollout") > 0
    has_grade = ctx.count("grader_call") > 0
    tok = "coalesce(l.tokens, r.tok)" if has_roll else "l.tokens"
    join_r = ("LEFT JOIN (SELECT sample_id, any_value(completion_tokens) tok FROM rollout GROUP BY sample_id) r "
              "USING (sample_id)") if has_roll else ""
    join_g = ("LEFT JOIN (SELECT sample_id, avg(reward) rw FROM grader_call WHERE reward IS NOT NULL "
              "GROUP BY sample_id) g USING (sample_id)") if has_grade else ""
    rw = "g.rw" if has_grade else "NULL"
    if not ctx.scalar(f"SELECT count(*) FROM ledger WHERE state = 'dropped'{ctx.step_filter()}"):
        return []  # nothing dropped: nothing selected (and no join over millions of consumed samples)
    # one row per (state, reason): count, and mean / variance / n of the length and the reward, in DuckDB
    agg = ctx.rows(
        f"SELECT l.state, coalesce(l.reason, '?'), count(*), avg({tok}), coalesce(var_samp({tok}), 0), "
        f"count({tok}), avg({rw}), coalesce(var_samp({rw}), 0), count({rw}) FROM (SELECT sample_id, state, "
        "any_value(reason) reason, max(tokens) tokens FROM ledger WHERE state IN ('consumed', 'dropped') "
        f"AND sample_id IS NOT NULL{ctx.step_filter()} GROUP BY sample_id, state) l {join_r} {join_g} GROUP BY ALL")
    n_consumed = sum(int(r[2]) for r in agg if r[0] == "consumed")
    dropped = {r[1]: r for r in agg if r[0] == "dropped"}
    cons = [r for r in agg if r[0] == "consumed"]

    def pooled(rs: list, m: int, v: int, c: int) -> tuple[float, float, int]:
        n = sum(int(r[c]) for r in rs)
        if not n:
            return math.nan, math.nan, 0
        mean = sum(float(r[m] or 0) * int(r[c]) for r in rs) / n
        ss = sum((int(r[c]) - 1) * float(r[v] or 0) + int(r[c]) * (float(r[m] or 0) - mean) ** 2 for r in rs if r[c])
        return mean, ss / max(n - 1, 1), n

    c_len = pooled(cons, 3, 4, 5)
    c_rew = pooled(cons, 6, 7, 8)
    if c_len[2] == 0 and c_rew[2] == 0:
        return Insufficient("dropped samples but no token count or reward for the consumed ones (ledger tokens / "
                            "rollout completion_tokens / grader_call reward)")
    total = n_consumed + sum(int(r[2]) for r in dropped.values())
    hits = []
    for reason, r in sorted(dropped.items()):
        n = int(r[2])
        lo, _ = wilson(n, total)
        if n < th["min_samples"] or lo < th["min_drop_share"]:
            continue
        d_len = pooled([r], 3, 4, 5)
        d_rew = pooled([r], 6, 7, 8)
        ev = []
        if d_len[2] >= th["min_samples"] and c_len[2] and c_len[0] > 0 and d_len[0] > 0:
            ratio = d_len[0] / c_len[0]
            z = _z(d_len, c_len, 0.01 * max(c_len[0], 1.0))
            if (ratio >= th["length_ratio"] or ratio <= 1 / th["length_ratio"]) and abs(z) > th["z"]:
                ev.append(Evidence(f"ledger[{reason}] dropped vs consumed mean completion tokens", round(ratio, 3),
                                   th["length_ratio"], None,
                                   f"dropped avg {d_len[0]:.1f} tokens (n {d_len[2]}) vs consumed {c_len[0]:.1f} "
                                   f"(n {c_len[2]}): {ratio:.2f}x, Welch z {z:.1f}"))
        if d_rew[2] >= th["min_samples"] and c_rew[2]:
            gap = d_rew[0] - c_rew[0]
            z = _z(d_rew, c_rew, 0.01)
            if abs(gap) >= th["reward_gap"] and abs(z) > th["z"]:
                ev.append(Evidence(f"ledger[{reason}] dropped vs consumed mean reward", round(gap, 4),
                                   th["reward_gap"], None,
                                   f"dropped {d_rew[0]:.3f} vs consumed {c_rew[0]:.3f}, Welch z {z:.1f}"))
        if ev:
            reward_biased = any("reward" in e.metric for e in ev)
            token_share = None
            if d_len[2] and c_len[2] and c_len[0] > 0:
                dropped_tokens = d_len[0] * n
                token_share = dropped_tokens / (dropped_tokens + c_len[0] * n_consumed)
            hits.append((reason, n, lo, ev, reward_biased, token_share))
    if not hits:
        return []
    reason, n, lo, ev, _, token_share = max(hits, key=lambda h: h[1])
    share = n / total
    first, last = ctx.rows("SELECT min(step), max(step) FROM ledger WHERE state = 'dropped' AND "
                           "coalesce(reason, '?') = ?", [reason])[0]
    span = None if first is None else (int(first), int(last))
    evidence = [Evidence(f"ledger dropped ({reason}) / terminal samples", round(share, 4), th["min_drop_share"], span,
                         f"{n} of {total} (95% CI from {lo:.2f})")] + [e for h in hits for e in h[3]]
    if token_share is not None:
        evidence.append(Evidence(f"generated tokens dropped ({reason})", round(token_share, 4), None, span,
                                 "share of the generated completion tokens the trainer never saw"))
    reward_biased = any(h[4] for h in hits)
    most_dropped = any(h[2] >= th["warn_drop_share"] for h in hits)
    severity = Severity.WARNING if reward_biased or most_dropped else Severity.INFO
    impact = ("the dropped samples' reward differs from the consumed ones'" if reward_biased else
              "most samples are dropped" if most_dropped else
              "length only, under half the samples dropped: informational")
    return [Finding(
        rule="selection-bias", severity=severity,
        title=f"admission drops are biased: {n} of {total} samples dropped as {reason}; "
              f"{ev[0].note.split(', Welch')[0]} ({impact})",
        # a property of the whole run, not an event: no onset, so an acute fault's finding ranks before it
        first_step=None, last_step=None,
        evidence=evidence,
        root_cause=f"samples dropped as '{reason}' are systematically different from the consumed ones (long "
                   "completions finish late and go stale first), so the trainer learns from a reshaped batch, "
                   "and samples/s overstates tokens/s",
        confidence=0.7,
        remediation=["raise max_staleness (or use importance-sampling correction instead of dropping)",
                     "keep partial rollouts across weight updates (interrupt=resume) so long answers are not lost",
                     "compare throughput in tokens/s, not samples/s"],
    )]
