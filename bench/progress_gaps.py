"""How long each run went without progress while it stepped: the spans a fresh-data gate on the precursor alerts
must outlast (``rlobs.dashboards.alerts.fresh_data``: an alert holds only while its run stepped within the recent
window or is in a declared pause; tried in the forty-seventh and forty-eighth early-warning runs, kept by the
forty-ninth), read from each record's own timing, not from a replay.

    python bench/progress_gaps.py --runs DIR [DIR ...] [--only A,B,...] [--after-step 5] --out bench/results/NAME

Progress is a trainer step, or any moment inside a declared pause (a held-out evaluation, a checkpoint save, a drain:
the gate stays open while one is under way, up to the no-progress alert's pause allowance, which is far
longer than the pauses here; a pause over it is reported). Per run: the longest span between two progress moments
after step ``--after-step`` (the precursor windows hold too few steps before it to fire), in mean steps (the run's wall time from
its first to its last step over its steps: at the pace the rules are built for, a mean step is one ``PERIOD`` of the
replay and the recent window holds 5 of them). The gate shuts while the run steps wherever a span is over the recent
window's steps. Records are read with ``early_warning.run_signals``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def longest_span(run: dict, after_step: int = 5) -> dict | None:
    """The longest span without progress after ``after_step`` in ``run`` (``run_signals``' output), in mean steps,
    with the step it ended at, and the longest declared pause in mean steps; None without timing."""
    from rlobs.dashboards.alerts import PRECURSOR_STEP_SECONDS, T

    steps = run["steps"]
    walls = [r.get("wall") for r in steps]
    if len(steps) < 2 or None in walls or walls[-1] <= walls[0]:
        return None
    mean = (walls[-1] - walls[0]) / (len(walls) - 1)
    pauses = sorted((p["wall"], p["wall"] + p["seconds"]) for p in run.get("pauses") or ())
    best, at = 0.0, None
    for i in range(1, len(steps)):
        if steps[i]["step"] <= after_step:
            continue
        a, b = walls[i - 1], walls[i]
        t = a  # the last progress moment so far in (a, b)
        for s, e in pauses:
            if e <= t or s >= b:
                continue
            if s > t and s - t > best * mean:
                best, at = (s - t) / mean, int(steps[i]["step"])
            t = max(t, e)
        if b - t > best * mean:
            best, at = (b - t) / mean, int(steps[i]["step"])
    longest_pause = max((e - s for s, e in pauses), default=0.0) / mean
    # the pauses longer than their allowance, inside which the gate shuts: pause_multiple x the mean of the pauses that
    # ended before, at least the floor (in steps of the committed rules' 2 minutes). The alert takes the slowest
    # kind's mean, at least this pooled one, so this flags a pause the alert might still allow, never the reverse
    floor = T.no_progress_pause_floor_seconds / PRECURSOR_STEP_SECONDS * mean
    start = next(w for r, w in zip(steps, walls) if r["step"] > after_step)
    over, done = [], []
    for s, e in pauses:
        allow = max(T.no_progress_pause_multiple * sum(done) / len(done), floor) if done else floor
        if s >= start and e - s > allow:  # (the evaluation before training, cold, ends before the alerts can fire)
            over.append(round((e - s) / mean, 2))
        done.append(e - s)
    return {"span_mean_steps": round(best, 2), "at_step": at, "longest_pause_mean_steps": round(longest_pause, 2),
            "pauses_over_allowance": over, "mean_step_s": round(mean, 4)}


def main() -> None:
    import early_warning as ew

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", nargs="+", required=True, help="record roots (bench/early_warning.py --runs)")
    ap.add_argument("--only", default="", help="comma-separated run names (default: every record under --runs)")
    ap.add_argument("--after-step", type=int, default=5)
    ap.add_argument("--window-steps", type=float, default=5.0, help="the recent window in steps (committed: 5)")
    ap.add_argument("--out", required=True, help="results stem (.json and .md are written)")
    args = ap.parse_args()
    only = {x for x in args.only.split(",") if x}
    rows = []
    for root in map(Path, args.runs):
        for d in sorted(p for p in root.iterdir() if p.is_dir() and (not only or p.name in only)):
            try:
                got = longest_span(ew.run_signals(d), args.after_step)
            except Exception as e:  # a damaged or unfinished record: named, not fatal
                print(f"{d}: not read ({type(e).__name__}: {e})", file=sys.stderr)
                continue
            if got is not None:
                rows.append({"run": d.name, "root": str(root), **got})
                print(json.dumps(rows[-1]), flush=True)
    rows.sort(key=lambda r: -r["span_mean_steps"])
    over = [r for r in rows if r["span_mean_steps"] > args.window_steps]
    long = [r for r in rows if r["pauses_over_allowance"]]
    res = {"what": "longest span without progress after step %d, in mean steps" % args.after_step,
           "runs": len(rows), "window_steps": args.window_steps, "over_window": [r["run"] for r in over],
           "pauses_over_allowance": {r["run"]: r["pauses_over_allowance"] for r in long},
           "rows": rows}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    md = [f"# Longest span without progress while stepping ({len(rows)} runs)", "",
          f"After step {args.after_step}; progress is a step or any moment inside a declared pause; in mean steps. "
          f"Over the recent window ({args.window_steps:g} steps): **{len(over)}** "
          f"({', '.join(r['run'] for r in over) or 'none'}). Runs with a declared pause longer than its allowance (the "
          f"no-progress alert's, at 2 minutes a step): **{len(long)}** ({', '.join(r['run'] for r in long) or 'none'}).",
          "",
          "| run | longest span (mean steps) | ending at step | longest declared pause (mean steps) |", "|---|---|---|---|"]
    md += [f"| {r['run']} | {r['span_mean_steps']} | {r['at_step']} | {r['longest_pause_mean_steps']} |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print(f"{len(rows)} runs; over {args.window_steps:g} mean steps: {len(over)}; longest "
          f"{rows[0]['span_mean_steps'] if rows else '-'} ({rows[0]['run'] if rows else '-'})")


if __name__ == "__main__":
    main()
