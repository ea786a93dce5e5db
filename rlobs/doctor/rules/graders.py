"""Grader rules: slow graders (against their own baseline), timeouts, hung calls."""

from __future__ import annotations

import statistics
from typing import Mapping

from rlobs.doctor.context import RunContext
from rlobs.doctor.model import Evidence, Finding, Insufficient, RuleResult, Severity, rule


def _calls_by_step(ctx: RunContext) -> str:
    """SQL of every grader call (step, grader_kind, latency_s, outcome) placed on a trainer step.

    Grader calls often carry no trainer step of their own (graders run in other processes); those are
    placed on the trainer step in progress when they finished, with an ASOF join on wall-clock time.
    Calls stamped with a step keep it and skip the join (a million calls need not be joined for nothing)."""
    return ("SELECT step, grader_kind, latency_s, outcome FROM grader_call WHERE step IS NOT NULL UNION ALL "
            "SELECT s.step, g.grader_kind, g.latency_s, g.outcome FROM "
            "(SELECT ts_ns, grader_kind, latency_s, outcome FROM grader_call WHERE step IS NULL) g "
            f"ASOF LEFT JOIN {ctx.step_starts()} s ON g.ts_ns >= s.ts_ns")


@rule("grader-slow", concern="grader", title="Grader latency far above its baseline",
      needs=("grader_call", "train_step"),
      thresholds={"ratio": 3.0, "min_seconds": 0.1, "baseline_steps": 3, "min_steps": 1},
      causes=("trainer-starved", "staleness-over-bound"))
def slow(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Per grader kind, the per-step p95 latency > ``ratio`` x the median p95 of the first
    ``baseline_steps`` steps (and above ``min_seconds``: 0.1 s, so the issue's 0.2 s-a-call grader is found by
    this rule too; no healthy calibration or development run has a per-step p95 above 0.05 s here)."""
    if not ctx.count("grader_call"):
        return Insufficient("no grader_call events")
    per: dict[str, dict[int, float]] = {}
    for kind, step, p95 in ctx.rows(
            f"SELECT grader_kind, step, quantile_cont(latency_s, 0.95) FROM ({_calls_by_step(ctx)}) "
            f"WHERE outcome = 'ok' AND latency_s IS NOT NULL AND step IS NOT NULL{ctx.step_filter()} GROUP BY ALL"):
        per.setdefault(kind or "?", {})[int(step)] = float(p95)
    out = []
    for kind, p95 in sorted(per.items()):
        steps = sorted(p95)
        n_base = int(th["baseline_steps"])
        if len(steps) <= n_base:
            continue
        base = statistics.median(p95[s] for s in steps[:n_base])
        limit = max(th["ratio"] * base, th["min_seconds"])
        bad = [s for s in steps[n_base:] if p95[s] > limit]
        if len(bad) < th["min_steps"]:
            continue
        worst = max(bad, key=lambda s: p95[s])
        out.append(Finding(
            rule="grader-slow", severity=Severity.WARNING,
            title=f"{kind} grader p95 latency rose to {p95[worst]:.3g} s (baseline {base:.3g} s) from step {bad[0]}",
            first_step=bad[0], last_step=bad[-1],
            evidence=[Evidence(f"grader_call[{kind}].latency_s p95", round(p95[worst], 4), round(limit, 4),
                               (bad[0], bad[-1]), f"{len(bad)} slow steps")] + _wait_share(ctx),
            root_cause=f"the {kind} grader slowed down (a slow sandbox, an overloaded judge model or a slow "
                       "external service), so rewards arrive late and the trainer waits",
            confidence=0.7,
            remediation=["decouple grading: run graders as a separate pool with more workers than generators",
                         "set per-call timeouts and treat a timeout as a grader error, not a hang",
                         "cache rewards of identical completions"],
        ))
    if not out and not any(len(v) > int(th["baseline_steps"]) for v in per.values()):
        return Insufficient("too few steps with grader calls for a baseline")
    return out


def _wait_share(ctx: RunContext) -> list[Evidence]:
    row = ctx.rows("SELECT sum(reward_wait_s), sum(coalesce(step_seconds, 0) + coalesce(data_wait_s, 0)) "
                   f"FROM train_step WHERE true{ctx.step_filter()}")
    if row and row[0][0] is not None and row[0][1]:
        return [Evidence("trainer wall time waiting on rewards", round(row[0][0] / row[0][1], 3), None)]
    return []


@rule("grader-timeouts", concern="grader", title="Grader calls time out", needs=("grader_call",),
      thresholds={"share": 0.05, "min_calls": 3})
def timeouts(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Share of calls per kind with outcome 'timeout' >= ``share`` (and at least ``min_calls`` of them)."""
    if not ctx.count("grader_call"):
        return Insufficient("no grader_call events")
    out = []
    for kind, n, n_to in ctx.rows("SELECT grader_kind, count(*), count(*) FILTER (WHERE outcome = 'timeout') "
                                  f"FROM grader_call WHERE true{ctx.step_filter()} GROUP BY grader_kind ORDER BY 1"):
        if n_to >= th["min_calls"] and n_to / n >= th["share"]:
            steps = [int(r[0]) for r in ctx.rows(
                f"SELECT step FROM ({_calls_by_step(ctx)}) WHERE outcome = 'timeout' AND step IS NOT NULL "
                "AND grader_kind = ?", [kind])]
            out.append(Finding(
                rule="grader-timeouts", severity=Severity.WARNING,
                title=f"{n_to} of {n} {kind} grader calls timed out ({n_to / n:.0%})",
                first_step=min(steps) if steps else None, last_step=max(steps) if steps else None,
                evidence=[Evidence(f"grader_call[{kind}] timeout share", round(n_to / n, 4), th["share"])],
                root_cause=f"the {kind} grader exceeds its per-call timeout: slow or hung calls; timed-out samples "
                           "get no reward and are wasted",
                confidence=0.7,
                remediation=["rlobs doctor RUN --rule grader-hung", "raise the timeout only after finding why calls hang",
                             "isolate the grader in its own pool so timeouts do not stall generation"],
            ))
    return out


@rule("grader-hung", concern="grader", title="Grader calls in flight past their deadline",
      needs=("grader_inflight", "grader_call"), causes=("grader-timeouts", "trainer-starved", "grader-slow"))
def hung(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """The grader watchdog saw calls in flight past the deadline (a hung grader looks like a deadlock
    elsewhere: the trainer waits, queues fill, heartbeats stop)."""
    if not ctx.count("grader_inflight"):
        return Insufficient("no grader_inflight (watchdog) events")
    rows = ctx.rows(
        "SELECT coalesce(g.step, s.step) st, g.grader_kind, g.overdue, g.oldest_age_s, g.deadline_s "
        f"FROM grader_inflight g ASOF LEFT JOIN {ctx.step_starts()} s ON g.ts_ns >= s.ts_ns WHERE g.overdue > 0 "
        "ORDER BY g.ts_ns")
    if not rows:
        return []
    steps = [int(r[0]) for r in rows if r[0] is not None]
    worst = max(rows, key=lambda r: r[3] or 0)
    return [Finding(
        rule="grader-hung", severity=Severity.CRITICAL,
        title=f"{worst[1]} grader: {worst[2]} call(s) in flight past the {worst[4]} s deadline "
              f"(oldest {worst[3]:.1f} s)",
        first_step=min(steps) if steps else None, last_step=max(steps) if steps else None,
        evidence=[Evidence(f"grader_inflight[{worst[1]}].oldest_age_s", round(worst[3] or 0, 2), worst[4])],
        root_cause="grader calls never return (a deadlocked sandbox, a judge request lost without a timeout): "
                   "everything downstream waits",
        confidence=0.85,
        remediation=["enforce a hard per-call timeout that kills the call (sandbox process group)",
                     "restart the grader pool; find the hung call's sample in `rlobs replay RUN`"],
    )]
