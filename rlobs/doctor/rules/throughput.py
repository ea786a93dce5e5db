"""Throughput rule: the trainer starved of data (waiting on the generator or the graders)."""

from __future__ import annotations

import math
import statistics
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

STAGES = ("grading", "generation", "weight sync", "admission")


def _stage_times(ctx: RunContext) -> dict[str, tuple[str, dict[int, float]]]:
    """Per upstream stage: (unit, value per trainer step), from whatever the record has. grading: the
    trainer's own wait for rewards (train_step.reward_wait_s), else phase('grading') seconds, else grader_call
    latency; generation: mean rollout latency (gen_seconds: it includes an engine that stalls), else
    phase('generation') seconds; weight sync: weight_sync end_to_end durations, else phase('sync');
    admission: samples dropped (stale, TTL) per step. A source that is all zero is skipped (trainer_ref's
    async modes log reward_wait_s = 0). Events without a step go to the step running when they happened."""
    starts = ctx.step_starts()

    def per_step(kind: str, value: str, where: str = "true", agg: str = "sum") -> dict[int, float]:
        if not ctx.count(kind):
            return {}
        rows = ctx.rows(
            f"SELECT coalesce(e.step, s.step) st, {agg}({value}) FROM {kind} e ASOF LEFT JOIN {starts} s "
            f"ON e.ts_ns >= s.ts_ns WHERE {where} GROUP BY st HAVING st IS NOT NULL")
        out = {int(a): float(b) for a, b in rows if b is not None}
        return out if any(v > 0 for v in out.values()) else {}

    rw = {int(a): float(b) for a, b in ctx.rows("SELECT step, max(reward_wait_s) FROM train_step WHERE step IS "
                                                "NOT NULL AND reward_wait_s IS NOT NULL GROUP BY step")}
    rw = rw if any(v > 0 for v in rw.values()) else {}
    generation = (("s/sample", per_step("rollout", "gen_seconds", "gen_seconds IS NOT NULL", "avg"))
                  if ctx.count("rollout") else ("s/step", per_step("phase", "seconds", "phase = 'generation'")))
    out = {"grading": ("s/step", rw or per_step("phase", "seconds", "phase = 'grading'")
                       or per_step("grader_call", "latency_s")),
           "generation": generation,
           "weight sync": ("s/step", per_step("weight_sync", "duration_s", "boundary = 'end_to_end'")
                           or per_step("phase", "seconds", "phase = 'sync'")),
           "admission": ("drops/step", per_step("ledger", "1", "state = 'dropped'"))}
    return {k: v for k, v in out.items() if v[1]}


@rule("trainer-starved", concern="throughput", title="Trainer waits for data far longer than its baseline",
      needs=("train_step",),
      # ratio, min_steps: the failure table (rlobs.failures), chosen on the calibration runs
      thresholds={"min_seconds": 0.1, "share": 0.0, "window": 4, "baseline_steps": 4,
                  "stage_growth": 3.0, "step_growth": 2.0, "sustain": 8})
def starved(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """The trainer's data wait dominates its step and grew against its own compute: over a trailing window
    of ``window`` steps (a pipelined trainer gets its data in bursts; full windows only, after the baseline), mean wait / mean optimiser step >
    ``ratio`` x the same ratio over the first ``baseline_steps`` steps (after the first), the mean wait more
    than ``min_seconds`` above the baseline's, the wait more than ``share`` of wait + step (off by default:
    frameworks disagree on what their step time includes), and the window's
    median wait also above the baseline (one long stall is not starvation); on ``min_steps`` windows. A
    machine-wide slowdown scales wait and step together and does not count; an upstream stage that falls
    behind grows the wait alone. Then it names the upstream stage the trainer waits for: the one whose
    per-step time grew most (>= ``stage_growth``-fold) between the baseline and the starved steps (grading,
    generation, weight sync; admission when samples are dropped instead), with that growth as evidence.
    Works on step-level phase timings alone (no per-call events). Severity: warning when a stage is named
    and the starvation is sustained (``sustain`` consecutive starved windows, or still starved in the record's
    last window: the alert would still be firing); info when none grew, when it recovered by itself (a few
    slow windows on a shared machine: healthy held-out runs had 3-4-window bursts while another tenant's
    load peaked), or when the optimiser step itself grew ``step_growth``-fold over the same steps (the whole
    machine slowed down: nothing upstream to fix)."""
    rows = [(int(s), float(w), float(t or 0.0)) for s, w, t in ctx.rows(
        "SELECT step, max(data_wait_s), max(step_seconds) FROM train_step "
        f"WHERE step IS NOT NULL AND data_wait_s IS NOT NULL{ctx.step_filter()} GROUP BY step ORDER BY step")]
    n_base, win = int(th["baseline_steps"]), int(th["window"])
    if len(rows) < n_base + win + 1:
        return Insufficient(f"{len(rows)} steps with data_wait_s; a baseline and one full window need "
                            f"{n_base + win + 1}")
    base_rows = rows[1:n_base + 1]
    # means, not medians: in separate_async the wait is bursty (0, 0, 0.3, 0: the median is 0 and every later
    # wait would look like starvation; tried after the held-out fault runs, it alarmed a healthy run)
    base = statistics.fmean(w for _, w, _ in base_rows)
    base_step = statistics.fmean(t for _, _, t in base_rows)
    base_ratio = base / base_step if base_step > 0 else math.inf
    hot_windows: list[int] = []
    hot_steps: set[int] = set()
    # full windows only: the first window ends ``window`` steps after the baseline (a window of one or two
    # steps right after the baseline is one slow warm-up step, not starvation: healthy sync runs on a loaded
    # machine found "starved" at steps 5-6 from exactly those partial windows)
    for i in range(n_base + win, len(rows)):
        seg = rows[i - win + 1:i + 1]
        w = statistics.fmean(r[1] for r in seg)
        t = statistics.fmean(r[2] for r in seg)
        med = statistics.median(r[1] for r in seg)
        grew = (w / t > th["ratio"] * base_ratio) if t > 0 and math.isfinite(base_ratio) else w > th["ratio"] * base
        if (grew and w - base > th["min_seconds"] and w > th["share"] * (w + t)
                and med > base + 0.5 * th["min_seconds"]):
            hot_windows.append(rows[i][0])
            hot_steps.update(r[0] for r in seg if r[1] - base > th["min_seconds"] and (
                r[1] > th["ratio"] * base_ratio * r[2] if r[2] > 0 and math.isfinite(base_ratio)
                else r[1] > th["ratio"] * base))
    if len(hot_windows) < int(th["min_steps"]):
        return []
    hot = sorted(hot_steps) or hot_windows
    first, last = hot[0], max(hot_windows)
    by_step = {s: (w, t) for s, w, t in rows}
    hot_steps_l = [s for s in hot if first <= s <= last]
    worst = max(hot_steps_l, key=lambda s: by_step[s][0])
    hot_wait = statistics.fmean(by_step[s][0] for s in hot_steps_l)
    hot_step = statistics.fmean(by_step[s][1] for s in hot_steps_l)
    extra = max(hot_wait - base, 1e-9)
    limit = th["ratio"] * base_ratio * hot_step if math.isfinite(base_ratio) else th["ratio"] * base
    # which upstream stage grew with the wait: the largest growth factor (means over the baseline and the
    # starved steps: phase events arrive in lumps), at least ``stage_growth``-fold, and for a stage measured
    # in seconds per step also a real share of the extra wait
    growth: list[tuple[float, str, float, float, str]] = []
    stage_data = _stage_times(ctx)
    for name, (unit, per) in stage_data.items():
        before = statistics.fmean(per.get(s, 0.0) for s, _, _ in base_rows)
        after = statistics.fmean(per.get(s, 0.0) for s in hot_steps_l)
        floor = 1.0 if unit == "drops/step" else 0.01
        factor = after / max(before, floor)
        if factor < th["stage_growth"] or (unit == "s/step" and after - before < 0.25 * extra):
            continue
        growth.append((factor, name, before, after, unit))
    growth.sort(reverse=True)
    stage = growth[0] if growth else None
    ev = [Evidence("train_step.data_wait_s", round(hot_wait, 4), round(limit, 4), (first, last),
                   f"mean {hot_wait:.3g} s vs baseline {base:.3g} s ({hot_wait / max(base, 1e-9):.3g}x) against an "
                   f"optimiser step of {hot_step:.3g} s (baseline {base_step:.3g} s); worst {by_step[worst][0]:.3g} s "
                   f"at step {worst}")]
    if stage is not None:
        factor, sname, before, after, unit = stage
        ev.append(Evidence(f"upstream stage: {sname}", round(after, 4), round(before, 4), (first, last),
                           f"{before:.3g} -> {after:.3g} {unit} ({factor:.3g}x)"
                           + (f", {min((after - before) / extra, 1):.0%} of the extra wait" if unit == "s/step"
                              else "")))
    causes = {"grading": "grading holds the trainer: rewards arrive late (slow or saturated graders)",
              "generation": "generation holds the trainer: the generator produces consumable samples slower than "
                            "the trainer consumes them",
              "weight sync": "weight sync holds the trainer: the generator waits for new weights before it "
                             "produces again",
              "admission": "admission control holds the trainer: samples are dropped (stale / TTL) instead of "
                           "consumed, so batches fill slowly"}
    named = stage[1] if stage is not None else None
    slowed = hot_step / base_step if base_step > 0 else 1.0
    machine_wide = slowed >= th["step_growth"]
    if machine_wide:
        ev.append(Evidence("train_step.step_seconds growth", round(slowed, 3), th["step_growth"], (first, last),
                           "the optimiser step slowed too: a machine-wide slowdown (CPU/GPU contention), "
                           "not one upstream stage"))
    # sustained: the longest run of consecutive starved windows, or starved in the record's last window
    index = {s: i for i, (s, _, _) in enumerate(rows)}
    longest, run = 0, 0
    for a, b in zip([None, *hot_windows], hot_windows):
        run = run + 1 if a is not None and index[b] == index[a] + 1 else 1
        longest = max(longest, run)
    ongoing = hot_windows[-1] == rows[-1][0]
    sustained = longest >= int(th["sustain"]) or ongoing
    if not sustained:
        ev.append(Evidence("consecutive starved windows", longest, int(th["sustain"]), (first, last),
                           f"recovered by itself: not starved in the record's last window (step {rows[-1][0]})"))
    # actionable when a stage explains the wait (or the record has no stage timings to ask: record them), the
    # trainer itself did not slow down with it, and it lasted; info when the stages the record has do not
    # explain it or it passed
    severity = (Severity.WARNING if (named or not stage_data) and not machine_wide and sustained
                else Severity.INFO)
    return [Finding(
        rule="trainer-starved", severity=severity,
        title=f"trainer waited {by_step[worst][0]:.3g} s for data at step {worst} (baseline {base:.3g} s); starved "
              f"over steps {first}-{last}" + (f", waiting for {named}" if named else ""),
        first_step=first, last_step=last, evidence=ev,
        root_cause=causes[named] if named else "the trainer waits for data but no upstream stage in the record "
                   "grew with the wait (record phase timings: probes.phase / train_step.reward_wait_s)",
        confidence=0.7 if named else 0.5,
        remediation={"grading": ["rlobs doctor RUN --rule grader-slow --rule grader-timeouts",
                                 "add grader workers or batch grader calls; set a grader timeout"],
                     "weight sync": ["rlobs doctor RUN --rule weight-sync-slow",
                                     "overlap the weight transfer with generation (async sync)"],
                     "admission": ["rlobs doctor RUN --rule selection-bias --rule staleness-over-bound",
                                   "raise max_staleness or the queue capacity"]}.get(
            named or "", ["compare effective generator throughput with trainer throughput (dashboard: staleness & "
                          "throughput)", "add generator replicas or move to separate_async with a deeper queue"]),
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
