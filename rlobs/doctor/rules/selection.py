"""Selection bias: what admission control threw away vs what the trainer learned from."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence

from rlobs.doctor.context import RunContext
from rlobs.doctor.model import (
    Evidence,
    Finding,
    Insufficient,
    RuleResult,
    Severity,
    rule,
)


Moments = tuple[float, float, int]  # mean, variance, n


def _z(a: Moments, b: Moments, floor: float) -> float:
    """Welch z of mean(a) - mean(b), the standard error floored (two constant samples are not infinite evidence)."""
    se = math.sqrt(a[1] / max(a[2], 1) + b[1] / max(b[2], 1))
    return (a[0] - b[0]) / max(se, floor)


def _pool(parts: Sequence[Moments]) -> Moments:
    """The mean, sample variance and count of the union of groups given by theirs."""
    n = sum(p[2] for p in parts)
    if not n:
        return math.nan, math.nan, 0
    mean = sum(p[0] * p[2] for p in parts) / n
    ss = sum((p[2] - 1) * p[1] + p[2] * (p[0] - mean) ** 2 for p in parts if p[2])
    return mean, ss / max(n - 1, 1), n


def _gap_at_same_length(dropped: Sequence[tuple[float, Moments]], consumed: Sequence[tuple[float, Moments]],
                        strata: int) -> tuple[float, float, int] | None:
    """The dropped samples' mean reward minus the consumed ones' at the same completion length: ``(gap, standard
    error, strata used)``, or None without both sides. Rows are ``(length, reward moments)``. Strata are cut at the
    consumed samples' length quantiles (``strata`` of them; ties merge strata); a dropped sample outside every
    populated stratum counts in the nearest one. The gap is the dropped-weighted mean of the per-stratum
    differences; its error, from the strata's variances."""
    consumed = sorted((t, m) for t, m in consumed if m[2])
    dropped = [(t, m) for t, m in dropped if m[2]]
    if not consumed or not dropped:
        return None
    total = sum(m[2] for _, m in consumed)
    cuts, seen, k = [], 0, 1
    for t, m in consumed:  # the length at each quantile k / strata of the consumed samples
        seen += m[2]
        while k < strata and seen >= k * total / strata:
            cuts.append(t)
            k += 1
    bounds = sorted(set(cuts))
    by_c: dict[int, list[Moments]] = {}
    for t, m in consumed:
        by_c.setdefault(bisect.bisect_right(bounds, t), []).append(m)
    populated = sorted(by_c)
    by_d: dict[int, list[Moments]] = {}
    for t, m in dropped:
        b = bisect.bisect_right(bounds, t)
        if b not in by_c:
            b = min(populated, key=lambda p: abs(p - b))
        by_d.setdefault(b, []).append(m)
    n_d = sum(m[2] for _, m in dropped)
    gap = var = 0.0
    for b, parts in by_d.items():
        d, c = _pool(parts), _pool(by_c[b])
        w = d[2] / n_d
        gap += w * (d[0] - c[0])
        var += w * w * (d[1] / d[2] + c[1] / c[2])
    return gap, math.sqrt(var), len(by_d)


@rule("selection-bias", concern="ledger", title="Admission control reshapes the training distribution",
      needs=("ledger",), thresholds={"length_ratio": 1.5, "reward_gap": 0.25, "min_drop_share": 0.1,
                                     "min_samples": 20, "z": 4.0, "warn_drop_share": 0.5,
                                     "length_strata": 10})
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
    changes what the gradient is estimated from: the dropped samples' reward differs from the consumed ones' at
    the same completion length (by ``reward_gap``, Welch z > ``z``: the drops select on the reward itself -- a
    grader slow on wrong answers, a TTL that catches the failures -- and the batch's reward distribution is not
    the policy's), or most of the samples are dropped (drop share's 95 % lower bound >= ``warn_drop_share``: the
    trainer learns from a minority of what was generated).

    "At the same length": strata at the consumed samples' length quantiles (``length_strata``; 1 compares the raw
    means, the rule before 6 Dec 2026). Long answers fail more often, so a length-biased drop lowers the dropped
    samples' raw mean reward too: on healthy separate_async runs of ``tiny-packed`` the raw gap was 0.19-0.29
    (the rule warned on 7 of 18 at the 0.25 bar) and -0.03..+0.04 at the same length (bench/selection_bias.py).
    A raw gap the lengths explain is shown as evidence of the info finding."""
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
    # one row per (state, reason, completion length): the count, and the reward's n / mean / variance, in DuckDB;
    # a run has as many rows as distinct lengths, so the per-reason moments and the strata are cheap in Python
    rows = ctx.rows(
        f"SELECT l.state, coalesce(l.reason, '?'), {tok}, count(*), count({rw}), avg({rw}), "
        f"coalesce(var_samp({rw}), 0) FROM (SELECT sample_id, state, any_value(reason) reason, max(tokens) tokens "
        f"FROM ledger WHERE state IN ('consumed', 'dropped') AND sample_id IS NOT NULL{ctx.step_filter()} "
        f"GROUP BY sample_id, state) l {join_r} {join_g} GROUP BY ALL")
    groups: dict[tuple[str, str], list[tuple[float | None, int, Moments]]] = {}
    for st, why, t, n, n_rw, m, v in rows:
        groups.setdefault((st, why), []).append((None if t is None else float(t), int(n),
                                                 (float(m or 0), float(v or 0), int(n_rw))))

    def length(rs: list) -> Moments:
        return _pool([(t, 0.0, n) for t, n, _ in rs if t is not None])

    def reward(rs: list) -> Moments:
        return _pool([m for _, _, m in rs])

    def by_length(rs: list) -> list[tuple[float, Moments]]:
        return [(t, m) for t, _, m in rs if t is not None]

    cons = [x for (st, _), rs in groups.items() if st == "consumed" for x in rs]
    dropped = {why: rs for (st, why), rs in groups.items() if st == "dropped"}
    n_consumed = sum(n for _, n, _ in cons)
    c_len, c_rew = length(cons), reward(cons)
    if c_len[2] == 0 and c_rew[2] == 0:
        return Insufficient("dropped samples but no token count or reward for the consumed ones (ledger tokens / "
                            "rollout completion_tokens / grader_call reward)")
    total = n_consumed + sum(n for rs in dropped.values() for _, n, _ in rs)
    hits = []
    for reason, rs in sorted(dropped.items()):
        n = sum(k for _, k, _ in rs)
        lo, _ = wilson(n, total)
        if n < th["min_samples"] or lo < th["min_drop_share"]:
            continue
        d_len, d_rew = length(rs), reward(rs)
        ev = []
        if d_len[2] >= th["min_samples"] and c_len[2] and c_len[0] > 0 and d_len[0] > 0:
            ratio = d_len[0] / c_len[0]
            z = _z(d_len, c_len, 0.01 * max(c_len[0], 1.0))
            if (ratio >= th["length_ratio"] or ratio <= 1 / th["length_ratio"]) and abs(z) > th["z"]:
                ev.append(Evidence(f"ledger[{reason}] dropped vs consumed mean completion tokens", round(ratio, 3),
                                   th["length_ratio"], None,
                                   f"dropped avg {d_len[0]:.1f} tokens (n {d_len[2]}) vs consumed {c_len[0]:.1f} "
                                   f"(n {c_len[2]}): {ratio:.2f}x, Welch z {z:.1f}"))
        reward_biased = False
        if d_rew[2] >= th["min_samples"] and c_rew[2]:
            gap = d_rew[0] - c_rew[0]
            z = _z(d_rew, c_rew, 0.01)
            raw = abs(gap) >= th["reward_gap"] and abs(z) > th["z"]
            same = (_gap_at_same_length(by_length(rs), by_length(cons), int(th["length_strata"]))
                    if th["length_strata"] > 1 else None)
            if same is None:  # no lengths (or one stratum): the raw means
                reward_biased = raw
                if raw:
                    ev.append(Evidence(f"ledger[{reason}] dropped vs consumed mean reward", round(gap, 4),
                                       th["reward_gap"], None,
                                       f"dropped {d_rew[0]:.3f} vs consumed {c_rew[0]:.3f}, Welch z {z:.1f}"))
            else:
                s_gap, s_se, used = same
                s_z = s_gap / max(s_se, 0.01)
                reward_biased = abs(s_gap) >= th["reward_gap"] and abs(s_z) > th["z"]
                if reward_biased:
                    ev.append(Evidence(f"ledger[{reason}] dropped vs consumed mean reward at the same length",
                                       round(s_gap, 4), th["reward_gap"], None,
                                       f"{s_gap:+.3f} over {used} length strata, Welch z {s_z:.1f}; "
                                       f"unadjusted: dropped {d_rew[0]:.3f} vs consumed {c_rew[0]:.3f}"))
                elif raw:
                    ev.append(Evidence(f"ledger[{reason}] dropped vs consumed mean reward", round(gap, 4), None,
                                       None, f"dropped {d_rew[0]:.3f} vs consumed {c_rew[0]:.3f}, Welch z {z:.1f}; "
                                       f"at the same length {s_gap:+.3f} (Welch z {s_z:.1f}, {used} strata): "
                                       "their length explains it"))
        if ev:
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
    impact = ("the dropped samples' reward differs from the consumed ones' at the same length" if reward_biased else
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
