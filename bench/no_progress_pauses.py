"""RlobsNoProgress on real trainer_ref runs: does a healthy run's evaluation page it, and is a hung run still paged?

    python bench/no_progress_pauses.py --runs DIR --only A,B,... --out bench/results/NAME

The alert's inputs are rebuilt from each record (a ``bench/early_warning.py`` run): the events of the kinds that feed
the series the rule names go, in time order, through the Prometheus sink's own routes (one ``PrometheusSink`` per
process of the record, created at its first event, not serving), and every series is sampled at each change and once
a second (``KEEPALIVE_S``), as a scrape would see it. The samples are written as OpenMetrics, backfilled into a TSDB
(``promtool tsdb create-blocks-from openmetrics``), and Debian's Prometheus evaluates the committed rule
(``rlobs.dashboards.alerts.no_progress_expr``) over each run with ``query_range`` every ``STEP_S`` seconds, with
both floors at 0: the regime of a large run, where a step takes minutes and only the multiples bind.

Scenarios of each run (each its own ``run`` label in the one TSDB):
- ``recorded``: as the run went. Any page is a page of a healthy, stepping or evaluating trainer.
- ``undeclared``: the same, the pause series left out (the heartbeats and phase events of ``PAUSE_PHASES``): the
  rule as it was before pauses counted.
- hangs: the record cut at a moment and every series held from there on for ``HOLD_S``, its processes up: in the
  middle of each declared pause after the first step (``hang-evaluation@S``, ``hang-drain@S``,
  ``hang-checkpoint@S``: S is the last step before it), and half a mean step after steps 22 and 42 (``hang-step@S``:
  not evaluation steps, which come every 5; the thirty-first run cut after 20 and 40 and landed in evaluations). Each must page; the expected moment is the rule's own arithmetic on the series at the cut (the
  later of the last step and the last pause's end, plus 5 step intervals, plus 5 mean pauses while one is under way).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KEEPALIVE_S = 1.0  # a sample of every series at least this often (a scrape), besides one at each change
STEP_S = 0.05  # query_range resolution, seconds
HOLD_S = 90.0  # how long a hang holds its series (record seconds)
HANG_AFTER_STEPS = (22, 42)  # (the thirty-first run's 20 and 40 fell inside evaluations)
STEP_METRICS = ("rlobs_train_steps_total", "rlobs_trainer_step_seconds_total", "rlobs_trainer_data_wait_seconds_total")


def thresholds() -> Any:
    """The committed thresholds with both floors at 0 (a large run's regime: only the multiples bind)."""
    from rlobs.dashboards.alerts import AlertThresholds

    return AlertThresholds(no_progress_floor_seconds=0.0, no_progress_pause_floor_seconds=0.0)


def rule_expr() -> str:
    from rlobs.dashboards.alerts import no_progress_expr

    return no_progress_expr(thresholds())


def _pause_event(kind: str, fields: Mapping[str, Any]) -> bool:
    from rlobs.schema import PAUSE_PHASES

    return (kind == "heartbeat" and fields.get("phase") in PAUSE_PHASES) or (
        kind == "phase" and fields.get("phase") in PAUSE_PHASES.values())


def read_events(run_dir: Path, names: Iterable[str]) -> dict[str, list[tuple]]:
    """Each process's events (``rlobs.events.RawEvent`` tuples, time order) of the kinds that feed ``names``."""
    import rlobs
    from rlobs.catalogue import CATALOGUE
    from rlobs.schema import ENVELOPE_NAMES

    kinds = sorted({CATALOGUE[n].source.kind for n in names if n in CATALOGUE and CATALOGUE[n].source})
    rec = rlobs.open_run(run_dir)
    out: dict[str, list[tuple]] = defaultdict(list)
    for kind in kinds:
        cur = rec.sql(f"select * from {kind} order by ts_ns")
        cols = [d[0] for d in cur.description]
        for row in cur.fetchall():
            r = dict(zip(cols, row))
            fields = {k: v for k, v in r.items() if k not in ENVELOPE_NAMES}
            out[r["process"]].append((kind, int(r["ts_ns"]), int(r["mono_ns"] or 0), r["step"], r["policy_version"],
                                      None, {**fields, "_component": r["component"], "_rank": r["rank"]}))
    for evs in out.values():
        evs.sort(key=lambda e: e[1])
    return dict(out)


def rebuild(events: Mapping[str, list[tuple]], names: Iterable[str], run: str, *, declared: bool = True,
            cut_ns: int | None = None, hold_s: float = 0.0) -> dict[tuple, list[tuple[float, float]]]:
    """The series ``names`` as the run's processes would have served them: {(name, labels): [(t_s, value)]}, a sample
    at each change and every ``KEEPALIVE_S``; ``up`` 1 for each process from its first event to its last. ``declared``
    False: the pause events left out. ``cut_ns``: nothing after it; every series (and ``up``) held ``hold_s`` more."""
    from rlobs.events import WriterInfo
    from rlobs.sinks.prometheus import PrometheusSink

    names = [n for n in names if n != "up"]
    out: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    end = run_end(events) if cut_ns is None else cut_ns / 1e9 + hold_s  # every process stays up until then
    for process, evs in events.items():
        evs = [e for e in evs if (declared or not _pause_event(e[0], e[6])) and (cut_ns is None or e[1] <= cut_ns)]
        if not evs:
            continue
        comp, rank = evs[0][6]["_component"], evs[0][6]["_rank"]
        sink = PrometheusSink(WriterInfo(run, process, comp, int(rank)), serve=False)
        metrics = [sink._metrics[n] for n in names if n in sink._metrics]
        t0, t1 = evs[0][1] / 1e9, end
        base = {"run": run, "component": comp, "rank": str(rank), "instance": process, "job": "rlobs"}
        last: dict[tuple, float] = {}
        last_t: dict[tuple, float] = {}

        def sample(t: float, force: bool = False) -> None:
            for m in metrics:
                for fam in m.collect():
                    for smp in fam.samples:
                        if smp.name.endswith("_created"):
                            continue
                        key = (smp.name, tuple(sorted({**base, **smp.labels}.items())))
                        if force or last.get(key) != smp.value or t - last_t.get(key, -1e18) >= KEEPALIVE_S:
                            out[key].append((t, smp.value))
                            last[key], last_t[key] = smp.value, t

        i, t = 0, t0
        routes = sink._routes
        while True:
            nxt = evs[i][1] / 1e9 if i < len(evs) else math.inf
            if nxt <= t:  # every event up to the next scrape, each change sampled when it happened
                while i < len(evs) and evs[i][1] / 1e9 <= nxt:
                    for r in routes.get(evs[i][0], ()):
                        r.apply(evs[i])
                    i += 1
                sample(nxt)
                continue
            if t > t1:
                break
            sample(t, force=True)
            t += KEEPALIVE_S
        sample(t1, force=True)
        up = out[("up", tuple(sorted(base.items())))]
        up += [(x, 1.0) for x in _grid(t0, t1)]
    return dict(out)


def run_end(events: Mapping[str, list[tuple]]) -> float:
    """The run's last event (its processes are stopped together after it)."""
    return max(evs[-1][1] for evs in events.values() if evs) / 1e9


def _grid(t0: float, t1: float) -> list[float]:
    n = int((t1 - t0) // KEEPALIVE_S)
    return [t0 + k * KEEPALIVE_S for k in range(n + 1)] + ([t1] if t0 + n * KEEPALIVE_S < t1 else [])


def openmetrics(series: Mapping[tuple, list[tuple[float, float]]]) -> str:
    """OpenMetrics text of ``series`` (families grouped, samples in time order), for promtool's backfill."""
    by_name: dict[str, list[tuple[tuple, list]]] = defaultdict(list)
    for (name, labels), samples in series.items():
        by_name[name].append((labels, samples))
    lines = []
    for name in sorted(by_name):
        lines.append(f"# TYPE {name} unknown")
        for labels, samples in by_name[name]:
            lab = ",".join(f'{k}="{v}"' for k, v in labels)
            seen = -1.0
            for t, v in sorted(samples):
                t = round(t, 3)
                if t <= seen:
                    continue
                seen = t
                lines.append(f"{name}{{{lab}}} {v:.17g} {t:.3f}")
    return "\n".join(lines) + "\n# EOF\n"


def step_walls(events: Mapping[str, list[tuple]]) -> list[tuple[int, float]]:
    """(step number, wall time) of each optimiser step, in order."""
    steps = sorted(e[1] / 1e9 for evs in events.values() for e in evs if e[0] == "train_step")
    return list(enumerate(steps, 1))


def mean_step(walls: list[tuple[int, float]]) -> float:
    """Mean wall seconds between two steps."""
    return (walls[-1][1] - walls[0][1]) / max(len(walls) - 1, 1) if walls else 0.0


def pauses(events: Mapping[str, list[tuple]]) -> list[tuple[str, float, float | None]]:
    """(pause phase, start, end or None) of each declared pause, in order."""
    from rlobs.schema import PAUSE_PHASES

    out: list[tuple[str, float, float | None]] = []
    for evs in events.values():
        open_: dict[str, float] = {}
        for e in evs:
            f = e[6]
            if e[0] == "heartbeat" and f.get("phase") in PAUSE_PHASES:
                open_[PAUSE_PHASES[f["phase"]]] = e[1] / 1e9
            elif e[0] == "phase" and f.get("phase") in open_:
                out.append((f["phase"], open_.pop(f["phase"]), e[1] / 1e9))
        out += [(p, t, None) for p, t in open_.items()]
    return sorted(out, key=lambda x: x[1])


def expected_deadline(series: Mapping[tuple, list[tuple[float, float]]], run: str, at: float) -> dict[str, float]:
    """The rule's arithmetic on the series as they stand at ``at`` (floors 0): the progress mark (the later of the last
    step and the last declared pause's end), the allowance (5 step intervals, plus 5 mean pauses of the slowest kind
    while one is under way) and their sum, the moment the rule is due to fire."""
    from rlobs.schema import PAUSE_PHASES

    t = thresholds()

    def value(name: str, **match: str) -> list[float]:
        vals = []
        for (n, labels), samples in series.items():
            lab = dict(labels)
            if n == name and lab.get("run") == run and all(lab.get(k) == v for k, v in match.items()):
                prior = [v for ts, v in samples if ts <= at + 1e-9]
                if prior:
                    vals.append(prior[-1])
        return vals

    steps, busy, wait = (sum(value(n)) for n in STEP_METRICS)
    last_step = max(value("rlobs_train_step_last_timestamp_seconds"), default=0.0)
    ends = {p: max(value("rlobs_phase_end_timestamp_seconds", phase=p), default=-math.inf)
            for p in PAUSE_PHASES.values()}
    beats = {p: max(value("rlobs_heartbeat_timestamp_seconds", phase=b), default=-math.inf)
             for b, p in PAUSE_PHASES.items()}
    means = [s / c for p in PAUSE_PHASES.values()
             for s, c in [(sum(value("rlobs_phase_seconds_total", phase=p)), sum(value("rlobs_phases_total", phase=p)))]
             if c > 0]
    in_pause = max(beats.values()) > max(ends.values())
    progress = max(last_step, max(ends.values()))
    allow = t.no_progress_step_multiple * (busy + wait) / steps if steps else 0.0
    if in_pause:
        allow += t.no_progress_pause_multiple * max(means, default=0.0)
    return {"progress": progress, "allowance": allow, "due": progress + allow, "in_pause": float(in_pause)}


def scenarios(events: Mapping[str, list[tuple]], name: str) -> list[dict[str, Any]]:
    """The run's scenarios: recorded, undeclared, and its hangs (where, the cut's time)."""
    walls = step_walls(events)
    half = mean_step(walls) / 2
    out = [{"scenario": "recorded", "run": f"{name}|recorded", "declared": True, "cut": None},
           {"scenario": "undeclared", "run": f"{name}|undeclared", "declared": False, "cut": None}]
    first = walls[0][1] if walls else math.inf
    for phase, start, end in pauses(events):
        if start > first and end is not None:  # (pauses after the last step too: a hung final evaluation)
            step = max(s for s, w in walls if w <= start)
            out.append({"scenario": f"hang-{phase}@{step}", "run": f"{name}|hang-{phase}@{step}", "declared": True,
                        "cut": (start + end) / 2})
    for k in HANG_AFTER_STEPS:
        if len(walls) > k:
            out.append({"scenario": f"hang-step@{k}", "run": f"{name}|hang-step@{k}", "declared": True,
                        "cut": walls[k - 1][1] + half})
    return out


def first_true(matrix: list[dict[str, Any]], run: str, after: float) -> float | None:
    """The first time ``run``'s alert series is present at or after ``after`` (None: never)."""
    times = [float(t) for r in matrix if r["metric"].get("run") == run for t, _ in r["values"]]
    times = [t for t in times if t >= after - 1e-6]
    return min(times) if times else None


def page_spans(matrix: list[dict[str, Any]], run: str) -> list[tuple[float, float]]:
    """The spans (start, end) in which ``run``'s alert series is present."""
    times = sorted(float(t) for r in matrix if r["metric"].get("run") == run for t, _ in r["values"])
    spans: list[tuple[float, float]] = []
    for t in times:
        if spans and t - spans[-1][1] <= STEP_S * 1.5:
            spans[-1] = (spans[-1][0], t)
        else:
            spans.append((t, t))
    return spans


def score_run(run_dir: Path, name: str, workdir: Path) -> dict[str, Any]:
    """``score_events`` on a record's events."""
    from rlobs.dashboards.selectors import metric_names

    return score_events(read_events(run_dir, sorted(metric_names(rule_expr()))), name, workdir)


def score_events(events: Mapping[str, list[tuple]], name: str, workdir: Path) -> dict[str, Any]:
    """Backfill one run's scenarios into a fresh TSDB, evaluate the rule over them, and score each."""
    from rlobs.dashboards.observe import LocalPrometheus
    from rlobs.dashboards.selectors import metric_names

    expr = rule_expr()
    names = sorted(metric_names(expr))
    scen = scenarios(events, name)
    walls = step_walls(events)
    series: dict[tuple, list[tuple[float, float]]] = {}
    for s in scen:
        cut_ns = None if s["cut"] is None else int(s["cut"] * 1e9)
        series.update(rebuild(events, names, s["run"], declared=s["declared"], cut_ns=cut_ns,
                              hold_s=HOLD_S if cut_ns else 0.0))
    om = workdir / f"{name}.om"
    om.write_text(openmetrics(series), encoding="utf-8")
    tsdb = workdir / f"{name}.tsdb"
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(tsdb)], check=True,
                   capture_output=True, text=True, timeout=600)
    t0 = min(t for ss in series.values() for t, _ in ss)
    t1 = max(t for ss in series.values() for t, _ in ss)
    matrix: list[dict[str, Any]] = []
    with LocalPrometheus([workdir], port=0, tsdb=tsdb, retention="3650d") as prom:  # (no target is written there)
        lo = t0
        while lo < t1:  # query_range answers at most 11000 points a series
            hi = min(t1, lo + 10_000 * STEP_S)
            matrix += prom.api("query_range", query=expr, start=f"{lo:.3f}", end=f"{hi:.3f}", step=f"{STEP_S:g}")[
                "result"]
            lo = hi + STEP_S
    step_s = mean_step(walls)
    rows = []
    for s in scen:
        row: dict[str, Any] = {"scenario": s["scenario"]}
        if s["cut"] is None:  # (a backfill has no staleness markers: the series would be held 5 minutes more)
            spans = [(a, b) for a, b in page_spans(matrix, s["run"]) if a <= run_end(events)]
            row["pages"] = [[round(a - walls[0][1], 2), round(b - a, 2)] for a, b in spans]
            row["paged_steps"] = sorted({max((k for k, w in walls if w <= a), default=0) for a, _ in spans})
        else:
            due = expected_deadline(series, s["run"], s["cut"])
            fired = first_true(matrix, s["run"], s["cut"])
            fired = fired if fired is not None and fired <= s["cut"] + HOLD_S else None
            early = [a for a, b in page_spans(matrix, s["run"]) if a < s["cut"]]
            row.update({"cut_s": round(s["cut"] - walls[0][1], 2), "in_pause": bool(due["in_pause"]),
                        "allowance_s": round(due["allowance"], 2), "due_after_cut_s": round(due["due"] - s["cut"], 2),
                        "fired_after_cut_s": None if fired is None else round(fired - s["cut"], 2),
                        "paged_before_cut": len(early)})
            row["within_bar"] = fired is not None and fired - s["cut"] <= due["allowance"] + step_s + STEP_S
        rows.append(row)
    return {"name": name, "steps": len(walls), "mean_step_s": round(step_s, 3),
            "pauses": [[p, round(a - walls[0][1], 2) if walls else a, None if b is None else round(b - a, 2)]
                       for p, a, b in pauses(events)],
            "scenarios": rows}


def markdown(results: list[dict[str, Any]]) -> str:
    lines = ["| run | mean step s | evaluations after step 1 (s) | recorded: pages | undeclared: pages (at step) | "
             "hangs paged within the bar | hang: fired / due after the cut (s) |", "|---|---|---|---|---|---|---|"]
    for r in results:
        sc = {x["scenario"]: x for x in r["scenarios"]}
        hangs = [x for x in r["scenarios"] if "cut_s" in x]
        evals = [f"{d:g}" for p, a, d in r["pauses"] if p == "evaluation" and d is not None and a > 0]
        lines.append(
            f"| {r['name']} | {r['mean_step_s']:g} | {', '.join(evals) or '-'} | {len(sc['recorded']['pages'])} | "
            f"{len(sc['undeclared']['pages'])}"
            + (f" ({', '.join(map(str, sc['undeclared']['paged_steps']))})" if sc['undeclared']['pages'] else "")
            + f" | {sum(x['within_bar'] for x in hangs)} of {len(hangs)} | "
            + "; ".join(f"{x['scenario']} {x['fired_after_cut_s']} / {x['due_after_cut_s']}" for x in hangs) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", required=True, type=Path, help="folder of bench/early_warning.py run records")
    ap.add_argument("--only", required=True, help="comma-separated run names")
    ap.add_argument("--out", required=True, type=Path, help="results path without suffix (.json and .md)")
    a = ap.parse_args(argv)
    t_start = time.time()
    results = []
    with tempfile.TemporaryDirectory(prefix="rlobs-noprogress-") as tmp:
        for name in a.only.split(","):
            r = score_run(a.runs / name, name, Path(tmp))
            results.append(r)
            print(json.dumps(r), flush=True)
    doc = {"expr": rule_expr(), "keepalive_s": KEEPALIVE_S, "step_s": STEP_S, "hold_s": HOLD_S,
           "seconds": round(time.time() - t_start, 1), "runs": results}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    md = markdown(results)
    a.out.with_suffix(".md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
