"""Twenty-fourth early-warning run: the bench's drop, rescored on every stored run (no training).

    python bench/early_warning_rescore.py select   # the calibration split: choose among the candidates
    python bench/early_warning_rescore.py score    # the held-out split and the rescored tables, once

Registered (5 Dec 2026) before any rescored figure was computed.

Why. ``bench/early_warning.py``'s drop has two legs: the training reward's 5-step mean 0.15 under its running
peak, or a held-out evaluation 0.15 under its best. On runs that plateau, the training-reward leg measures noise:
it fired on 7 of the 12 healthy-ppo4 runs (twenty-third run) and 4 of the 6 held-out healthy-t03 runs (twenty-first),
whose held-out success held. A drop that noise triggers mislabels the mixed classes (a warning on a run that only
drew a noisy step counts as a detection, not as a false warning) and starts lead times at the wrong step.

The data. Every ``bench/results/early_warning*.json`` with per-run ``reward`` and ``evals``, each run once (a run
scored in several files, under other rules, has the same series: deduplicated by name and series), the split as
stored, exploratory runs left out. What a run *is* comes from its class: ``healthy`` (every healthy setting, the
variants included) should have no drop; the four classes that collapsed on every seed so far (``SURE``: lr too high,
warm-up too high, KL blow-up, staleness without IS at max staleness 8) should. Mixed classes are not used to choose.
The rules' warnings are not read while choosing: only the drop is on trial.

Candidates (``early_warning.drop_step_confirmed``; the current drop is ``hold=1``, no confirmation):

- ``hold5`` / ``hold10``: the training leg counts when its 5-step mean stays 0.15 under the peak for 5 / 10
  consecutive steps; the held-out leg as now;
- ``hold5-confirm`` / ``hold10-confirm``: the same, and a held-out fall counts when the next evaluation is 0.15
  under the same best too;
- ``heldout`` / ``heldout-confirm``: held-out success alone, as now / confirmed.

Choice, on the calibration split only: the candidates with the fewest healthy runs with a drop (0 if any has 0);
among them the largest share of ``SURE`` runs with a drop; then the smallest median delay (its drop step minus the
current drop's, over the ``SURE`` runs both find); then the order listed above.

Adoption, on the held-out split, judged once: the chosen drop replaces the current one in the bench only if
(i) healthy runs with a drop: at most 5 % and at most a third of the current drop's count;
(ii) ``SURE`` runs: a drop on at least 95 % of those the current drop finds one on;
(iii) median delay against the current drop on ``SURE`` runs: at most 3 steps.
Either way the rescored early-warning tables are reported: per class, warned before the drop and lead, under
both drops, for the files scored under today's rules (the twentieth run onward). These runs were all looked at
before (their held-out success and training reward are in README tables), so the held-out split here is held out
from the choice of the drop, not unseen.

Follow-up, registered after ``score`` printed "not adopted" (hold5-confirm failed check (ii): 114 of the 144 SURE
drops), before any continuation was trained. Check (ii) took the SURE classes' current drops to be real. Of the
26 held-out lr-too-high runs whose current drop hold5-confirm does not confirm, several are back at their best
by the next evaluation (s4: held-out 0.37 -> 0.21 -> 0.22 -> 0.28 -> 0.31 -> 0.38, its training reward flat at
~0.5), and others fall in the run's last steps, where nothing can be confirmed. Which drop is right needs a ground
truth neither reads:

    python bench/early_warning_rescore.py continue --src /work/records/ew20 --dst DIR   # 40 -> 60 steps
    python bench/early_warning_rescore.py truth --dst DIR

The twentieth run's 44 records (every class and the main healthy settings, held out, today's rules; their step-40
checkpoints at hand) are continued to step 60 with their own flags (``--resume``). A run *collapsed* when the mean
of its held-out evaluations at steps 45-60 is at least DROP under its best evaluation up to step 40. Reported, for
the current drop and every candidate, read on steps 0-40 only: collapses it finds, collapses it misses, drops on
runs that did not collapse. Descriptive: it does not revisit the adoption above. A drop that agrees better with
the truth becomes a registration for fresh runs, not the bench's drop by this check alone.

Fresh test, registered while the follow-up's continuations were training, before any of these runs was trained
(a correction to the first wording, "before its truth was computed": the truth of the first 14 continued runs,
lr-too-high 80-85, warm-up 18-21, KL 20-23, had been printed once, as a check of the code; it showed none of the six
lr-too-high runs below its best by 0.15 at steps 45-60, which is why that class has 8 of the fresh runs) (``RUN24`` in ``bench/early_warning.py``): 38 runs of 60 steps on fresh
seeds, lr-too-high 86-93, kl-blow-up 24-29, lr-warmup-too-high 22-25, staleness-no-is 38-41,
staleness-no-is-lag4 63-68, healthy 80-85, healthy-async 16-19:

    python bench/early_warning.py run --runs DIR --steps 60 --only <those names>
    python bench/early_warning_rescore.py truth --dst DIR --fresh

The candidate is the one with the fewest errors (collapses missed + drops on runs that did not collapse) against
the truth on the follow-up's continued records, ties in the registered order; if the current drop has no more
errors than every candidate, there is nothing to test. On the fresh runs, judged once with the same truth (drops
read on steps 0-40, the truth on evaluations 45-60): the candidate replaces the bench's drop if it makes fewer
errors than the current drop and misses at most one collapse more. If it does, the tables under today's rules are
rescored with it and README's standing restated; if not, the current drop stays and the result is reported.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import early_warning as ew  # noqa: E402

SURE = ("lr-too-high", "lr-warmup-too-high", "kl-blow-up", "staleness-no-is")
CANDIDATES: dict[str, dict] = {
    "hold5": {"hold": 5}, "hold10": {"hold": 10},
    "hold5-confirm": {"hold": 5, "confirm": True}, "hold10-confirm": {"hold": 10, "confirm": True},
    "heldout": {"train_leg": False}, "heldout-confirm": {"train_leg": False, "confirm": True},
}
CURRENT = "current"
# results files scored under today's rules (the twentieth run onward; the rules have not changed since, apart from
# the info rule staleness-uncorrected, which is not a warning, and policy_kl measuring one update, which only runs
# with several updates per step record differently: the twenty-third run's)
TODAY = ("early_warning_run20", "early_warning_run21_rules_before", "early_warning_run21_calibration_rules_before",
         "early_warning_run21_low_temperature", "early_warning_run21_low_temperature_calibration",
         "early_warning_run22_rules_before", "early_warning_run23", "early_warning_run23_calibration")


def _series(r: dict) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    return list(enumerate(r["reward"])), [(int(s), float(v)) for s, v in r["evals"]]


def drop(r: dict, cand: str) -> int | None:
    reward, evals = _series(r)
    if cand == CURRENT:
        return ew.drop_step(reward, evals)[0]
    return ew.drop_step_confirmed(reward, evals, **CANDIDATES[cand])[0]


def drops(r: dict) -> dict[str, int | None]:
    """The run's drop step under the current drop and every candidate, each computed once."""
    return {c: drop(r, c) for c in (CURRENT, *CANDIDATES)}


def load(files: list[Path] | None = None) -> list[dict]:
    """Every stored run once, with the file it was first found in. By default the files as they stood when the
    run was registered: this run's own results (``early_warning_run24*``, the fresh runs among them) are not part
    of what it rescored, so ``select`` and ``score`` reproduce their saved tables."""
    files = files or sorted(Path(p) for p in glob.glob(str(ROOT / "bench/results/early_warning*.json"))
                            if not Path(p).name.startswith("early_warning_run24"))
    seen, out = set(), []
    for f in files:
        d = json.loads(f.read_text())
        runs = d.get("runs") if isinstance(d, dict) else None
        if not isinstance(runs, list):
            continue
        for r in runs:
            if "reward" not in r or "evals" not in r or r.get("class") in (None, "exploratory"):
                continue
            key = (r["name"], tuple(r["reward"]), tuple(map(tuple, r["evals"])))
            if key in seen:
                continue
            seen.add(key)
            out.append({**r, "file": f.stem})
    return out


def drop_table(runs: list[dict], split: str) -> dict:
    """Per candidate: healthy runs with a drop, SURE runs with one, the delay against the current drop."""
    sel = [{**r, "drops": drops(r)} for r in runs if r["split"] == split and (r["class"] == "healthy" or
                                                                            r["class"] in SURE)]
    healthy = [r for r in sel if r["class"] == "healthy"]
    sure = [r for r in sel if r["class"] in SURE]
    out = {}
    for cand in (CURRENT, *CANDIDATES):
        hd = [r["name"] for r in healthy if r["drops"][cand] is not None]
        sd = [r for r in sure if r["drops"][cand] is not None]
        both = [r for r in sd if r["drops"][CURRENT] is not None]
        delays = [r["drops"][cand] - r["drops"][CURRENT] for r in both]
        by_class = {c: f"{sum(1 for r in sd if r['class'] == c)}/{sum(1 for r in sure if r['class'] == c)}"
                    for c in SURE}
        out[cand] = {"healthy_runs": len(healthy), "healthy_with_drop": len(hd), "healthy_dropped": hd,
                     "sure_runs": len(sure), "sure_with_drop": len(sd), "sure_by_class": by_class,
                     "sure_found_by_current_too": len(both),
                     "median_delay": statistics.median(delays) if delays else None,
                     "max_delay": max(delays) if delays else None}
    return out


def choose(table: dict) -> str:
    order = list(CANDIDATES)
    return min(order, key=lambda c: (table[c]["healthy_with_drop"],
                                     -table[c]["sure_with_drop"] / max(1, table[c]["sure_runs"]),
                                     table[c]["median_delay"] if table[c]["median_delay"] is not None else 99,
                                     order.index(c)))


def adopt(table: dict, cand: str) -> dict:
    cur, new = table[CURRENT], table[cand]
    cur_sure = cur["sure_with_drop"]
    checks = {
        "healthy: at most 5 % and a third of the current": new["healthy_with_drop"] <= 0.05 * new["healthy_runs"]
        and new["healthy_with_drop"] <= cur["healthy_with_drop"] / 3,
        "sure: a drop on 95 %+ of those the current finds": new["sure_found_by_current_too"] >= 0.95 * cur_sure,
        "sure: median delay at most 3 steps": new["median_delay"] is not None and new["median_delay"] <= 3,
    }
    return {"candidate": cand, "checks": checks, "adopted": all(checks.values())}


def rescored(cand: str) -> dict:
    """The early-warning summary of the files scored under today's rules, under the current drop and ``cand``."""
    # read from TODAY's files themselves: load() over every file keeps a run's first file, which for the
    # twenty-first and twenty-second runs is the one scored with a leg since reverted (run21.json < run21_rules_...)
    rows = load([ROOT / f"bench/results/{f}.json" for f in TODAY])
    out = {}
    for name in (CURRENT, cand):
        out[name] = ew.summarise([{**r, "drop_step": drop(r, name)} for r in rows])
    return out


def _md_drop(table: dict, split: str) -> list[str]:
    lines = [f"### {split} split: the drop itself", "",
             "| drop | healthy runs with a drop | sure-collapse runs with a drop (lr / warm-up / KL / staleness) | "
             "median delay vs current (max) |", "|---|---|---|---|"]
    for c, t in table.items():
        by = " / ".join(t["sure_by_class"][k] for k in SURE)
        lines.append(f"| {c} | {t['healthy_with_drop']} of {t['healthy_runs']} | {t['sure_with_drop']} of "
                     f"{t['sure_runs']} ({by}) | {t['median_delay']} ({t['max_delay']}) |")
    return lines + [""]


def _md_summary(summ: dict, split: str) -> list[str]:
    lines = ["| class | runs | collapsed | warned before the drop | leads | median lead | warned, no drop |",
             "|---|---|---|---|---|---|---|"]
    s = summ[split]
    for cls, c in s["classes"].items():
        lines.append(f"| {cls} | {c['runs']} | {c['collapsed']} | {c['warned_early']} | "
                     f"{', '.join(map(str, c['leads'])) or '-'} | {c['median_lead']} | "
                     f"{len(c['warned_without_drop'])} |")
    lines += ["", f"Healthy (and mixed runs without a drop): {s['healthy_runs']}, with a warning: "
                  f"{len(s['healthy_with_warning'])} ({', '.join(s['healthy_with_warning']) or 'none'}); "
                  f"with a drop: {len(s['healthy_that_dropped'])}. Median lead: {s['median_lead_all']}.", ""]
    return lines


TRUTH_FROM, TRUTH_TO, CONTINUE_TO = 45, 60, 60  # the ground truth's evaluations (steps) and the continued length
RUN20 = "early_warning_run20"


def continue_runs(src: Path, dst: Path) -> None:
    """Copy each stored run of the twentieth run and continue it from its latest checkpoint to ``CONTINUE_TO``."""
    rows = load([ROOT / f"bench/results/{RUN20}.json"])
    dst.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": "local"}
    for r in rows:
        d = dst / r["name"]
        if (d / "continued.json").is_file():
            continue
        if not d.exists():
            shutil.copytree(src / r["name"], d, symlinks=True)
        t0 = time.time()
        with open(dst / f"{r['name']}.log", "wb") as f:
            rc = subprocess.call(["nice", "-n", "15", sys.executable, "-m", "trainer_ref.run", *ew.COMMON, "--steps",
                                  str(CONTINUE_TO), "--seed", str(r["seed"]), "--run-dir", str(d), *r["args"],
                                  "--resume"], cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
        info = {"name": r["name"], "rc": rc, "seconds": round(time.time() - t0, 1)}
        if rc == 0:
            (d / "continued.json").write_text(json.dumps(info))
        print(json.dumps(info), flush=True)


def _record_series(d: Path) -> tuple[list[float], list[tuple[int, float]]]:
    from rlobs.doctor.context import RunContext
    from rlobs.doctor.rules.precursors import heldout, series
    from rlobs.store import open_run

    rec = open_run(d)
    try:
        ctx = RunContext(rec)
        return [v for _, v in series(ctx, "reward")], [(int(s), float(v)) for s, v in heldout(ctx)]
    finally:
        rec.close()


def truth(dst: Path, fresh: bool = False) -> dict:
    """Per drop (read on steps 0-40 only), agreement with the outcome at steps 45-60: the follow-up's continued
    twentieth-run records (``fresh`` False: their stored rows, warnings included) or the fresh test's runs."""
    if fresh:
        rows = [{**json.loads((d / "early_warning_run.json").read_text()), "first_warning": None}
                for d in sorted(dst.iterdir()) if (d / "early_warning_run.json").is_file()]
    else:
        rows = [r for r in load([ROOT / f"bench/results/{RUN20}.json"]) if (dst / r["name"] / "continued.json").is_file()]
    judged = []
    for r in rows:
        reward, evals = _record_series(dst / r["name"])
        late = [v for s, v in evals if TRUTH_FROM <= s <= TRUTH_TO]
        if len(late) < 3:
            continue
        first = {"reward": reward[:40], "evals": [(s, v) for s, v in evals if s <= 40]}
        best40 = max(v for _, v in first["evals"])
        same = None if fresh else ([round(v, 6) for _, v in first["evals"]] == [round(v, 6) for _, v in r["evals"]]
                                   and [round(v, 4) for v in first["reward"]] == r["reward"])
        j = {**r, **first, "late_evals": late, "best40": best40,
             "collapsed": statistics.fmean(late) <= best40 - ew.DROP, "first40_match": same}
        judged.append({**j, "drops": drops(j)})
    out = {"runs": len(judged), "collapsed": sum(j["collapsed"] for j in judged),
           "first40_match": None if fresh else all(j["first40_match"] for j in judged), "per_drop": {},
           "per_run": []}
    for cand in (CURRENT, *CANDIDATES):
        found = [j["name"] for j in judged if j["collapsed"] and j["drops"][cand] is not None]
        missed = [j["name"] for j in judged if j["collapsed"] and j["drops"][cand] is None]
        false = [j["name"] for j in judged if not j["collapsed"] and j["drops"][cand] is not None]
        out["per_drop"][cand] = {"found": len(found), "missed": missed, "false_drops": false,
                                 "errors": len(missed) + len(false)}
    for j in judged:
        out["per_run"].append({"name": j["name"], "class": j["class"], "best40": round(j["best40"], 3),
                               "late_mean": round(statistics.fmean(j["late_evals"]), 3), "collapsed": j["collapsed"],
                               "drops": j["drops"],
                               "first_warning": j.get("first_warning")})
    return out


def fresh_candidate(follow_up: dict) -> str | None:
    """The registered pick: the fewest errors on the follow-up, ties in order; None if the current drop has no
    more errors than every candidate."""
    per = follow_up["per_drop"]
    best = min(CANDIDATES, key=lambda c: (per[c]["errors"], list(CANDIDATES).index(c)))
    return best if per[best]["errors"] < per[CURRENT]["errors"] else None


def fresh_verdict(fresh: dict, cand: str) -> dict:
    cur, new = fresh["per_drop"][CURRENT], fresh["per_drop"][cand]
    checks = {"fewer errors than the current drop": new["errors"] < cur["errors"],
              "at most one more collapse missed": len(new["missed"]) <= len(cur["missed"]) + 1}
    return {"candidate": cand, "checks": checks, "adopted": all(checks.values())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("select", "score", "continue", "truth"))
    ap.add_argument("--out", default=str(ROOT / "bench/results/early_warning_run24_rescore"))
    ap.add_argument("--src", default="/work/records/ew20", help="continue: the twentieth run's records")
    ap.add_argument("--dst", default="/work/records/ew24", help="continue / truth: the continued copies")
    ap.add_argument("--fresh", action="store_true", help="truth: the fresh test's runs in --dst")
    args = ap.parse_args()
    if args.cmd == "continue":
        continue_runs(Path(args.src), Path(args.dst))
        return
    if args.cmd == "truth":
        res = truth(Path(args.dst), fresh=args.fresh)
        if args.fresh:  # the registered pick from the follow-up's result, then the verdict
            follow = json.loads(Path(args.out + "_truth.json").read_text())
            cand = fresh_candidate(follow)
            res["candidate"] = cand
            res["verdict"] = fresh_verdict(res, cand) if cand else "nothing to test: no candidate beat the current drop"
        Path(args.out + ("_fresh" if args.fresh else "_truth") + ".json").write_text(json.dumps(res, indent=1) + "\n")
        print(json.dumps({k: v for k, v in res.items() if k != "per_run"}, indent=1))
        return
    runs = load()
    cal = drop_table(runs, "calibration")
    chosen = choose(cal)
    lines = ["# Early warning, twenty-fourth run: the drop rescored (bench/early_warning_rescore.py)", "",
             f"{len(runs)} stored runs (deduplicated); calibration {sum(r['split'] == 'calibration' for r in runs)}, "
             f"held out {sum(r['split'] == 'heldout' for r in runs)}.", "", *_md_drop(cal, "calibration"),
             f"Chosen on the calibration split: **{chosen}**.", ""]
    res = {"registered": "bench/early_warning_rescore.py docstring", "candidates": CANDIDATES, "sure": SURE,
           "runs": len(runs), "calibration": cal, "chosen": chosen}
    if args.cmd == "score":
        held = drop_table(runs, "heldout")
        verdict = adopt(held, chosen)
        summ = rescored(chosen)
        res.update(heldout=held, adoption=verdict, rescored_today=summ)
        lines += _md_drop(held, "held-out")
        lines += ["Adoption checks (held out): " + "; ".join(f"{k}: {'yes' if v else 'no'}"
                                                          for k, v in verdict["checks"].items()),
                  f"**{'adopted' if verdict['adopted'] else 'not adopted'}**", ""]
        for name, summary in summ.items():
            for split in ("calibration", "heldout"):
                lines += [f"### Files scored under today's rules, {split} split, drop: {name}", "",
                          *_md_summary(summary, split)]
    Path(args.out + ("" if args.cmd == "score" else "_select") + ".json").write_text(json.dumps(res, indent=1) + "\n")
    Path(args.out + ("" if args.cmd == "score" else "_select") + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
