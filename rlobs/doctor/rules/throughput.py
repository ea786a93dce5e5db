"""Throughput rule: the trainer starved of data (waiting on the generator or the graders)."""

from __future__ import annotations

import statistics
from typing import Mapping

from rlobs.doctor.context import RunContext
from rlobs.doctor.model import Evidence, Finding, Insufficient, RuleResult, Severity, rule


@rule("trainer-starved", concern="throughput", title="Trainer waits for data far longer than its baseline",
      needs=("train_step",),
      thresholds={"ratio": 3.0, "min_seconds": 0.5, "baseline_steps": 3, "min_steps": 2, "gap_steps": 1})
def starved(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Per-step data wait > ``ratio`` x the median wait of the first ``baseline_steps`` steps (after the
    first), above ``min_seconds``, on at least ``min_steps`` steps no more than ``gap_steps`` apart: a
    pipelined trainer gets its data in bursts (a starved one waits long every other step, then finds the
    next batch ready), while one long wait alone is not starvation."""
    rows = [(int(s), float(w), float(r or 0.0), float(t or 0.0)) for s, w, r, t in ctx.rows(
        "SELECT step, max(data_wait_s), max(reward_wait_s), max(step_seconds) FROM train_step "
        f"WHERE step IS NOT NULL AND data_wait_s IS NOT NULL{ctx.step_filter()} GROUP BY step ORDER BY step")]
    n_base = int(th["baseline_steps"])
    if len(rows) <= n_base + 1:
        return Insufficient(f"{len(rows)} steps with data_wait_s; a baseline needs more than {n_base + 1}")
    base = statistics.median(w for _, w, _, _ in rows[1:n_base + 1])
    limit = max(th["ratio"] * base, th["min_seconds"] + base)
    hot = [s for s, w, _, _ in rows[n_base + 1:] if w > limit]
    runs = _clusters(hot, int(th["min_steps"]), int(th["gap_steps"]))
    if not runs:
        return []
    first, last = runs[0][0], runs[-1][1]
    in_run = [r for r in rows if first <= r[0] <= last and r[0] in hot]
    wait = sum(r[1] for r in in_run)
    reward_wait = sum(r[2] for r in in_run)
    by_graders = wait > 0 and reward_wait / wait > 0.5
    worst = max(in_run, key=lambda r: r[1])
    return [Finding(
        rule="trainer-starved", severity=Severity.WARNING,
        title=f"trainer waited {worst[1]:.3g} s for data at step {worst[0]} (baseline {base:.3g} s); "
              f"starved over steps {first}-{last}",
        first_step=first, last_step=last,
        evidence=[Evidence("train_step.data_wait_s", round(worst[1], 4), round(limit, 4), (first, last)),
                  Evidence("share of that wait spent on graders", round(reward_wait / wait, 3) if wait else 0.0)],
        root_cause=("graders are the bottleneck: rewards arrive late" if by_graders else
                    "the generator is the bottleneck: it produces consumable samples slower than the trainer "
                    "consumes them (slow generation, sync bubbles, or samples dropped as stale)"),
        confidence=0.6,
        remediation=["compare effective generator throughput with trainer throughput (dashboard: staleness & "
                     "throughput)", "add generator replicas or move to separate_async with a deeper queue",
                     "rlobs doctor RUN --rule grader-slow --rule weight-sync-slow"],
    )]


def _clusters(steps: list[int], min_members: int, gap: int) -> list[tuple[int, int]]:
    """(first, last) of each group of steps whose neighbours are at most ``gap`` missing steps apart,
    keeping groups with at least ``min_members`` steps."""
    out: list[tuple[int, int]] = []
    group: list[int] = []
    for s in sorted(set(steps)):
        if group and s - group[-1] > gap + 1:
            if len(group) >= min_members:
                out.append((group[0], group[-1]))
            group = []
        group.append(s)
    if len(group) >= min_members:
        out.append((group[0], group[-1]))
    return out
