"""Evaluation of ``rlobs import`` + ``rlobs doctor`` on other trainers' logs (the corpus of bench/peer_corpus.py).

    python -m bench.doctor_eval_peers [--frameworks verl,trl] [--healthy 3] [--keep DIR]

For every framework: healthy runs (3 seeds) and every problem its logged metrics can reveal, at two magnitudes
and two onsets, each written in the framework's own format by the real library where it installs here
(SummaryWriter, transformers' TrainerState, the wandb SDK offline), imported with ``rlobs import`` and
diagnosed. Scores per framework: recall (the expected rule fires), top-1 (it is the first ranked finding),
false alarms (warning/critical findings on healthy runs; any other warning/critical rule on a faulty run is
listed as a secondary finding), and the delay from onset to the expected finding's first step against the
allowed delay. Results: bench/results/doctor_eval_peers.json and .md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import peer_corpus as pc

RESULTS = Path(__file__).resolve().parent / "results"


def evaluate(run: dict[str, Any], root: Path) -> dict[str, Any]:
    import rlobs
    from rlobs.doctor import diagnose
    from rlobs.doctor.model import Severity
    from rlobs.importers import import_run

    name = f"{run['framework']}-{run['format']}-{run['problem'] or 'healthy'}-{run['magnitude']}-{run['onset']}-{run['seed']}"
    folder = root / name
    source, path = pc.write_run(run["framework"], pc.series_for(run), folder / "src", run["format"])
    report = import_run(source, path, folder / "run")
    with rlobs.open_run(folder / "run") as rec:
        doc = diagnose(rec)
    alarms = [f for f in doc.findings if f.severity >= Severity.WARNING]
    out = {**run, "name": name, "import_issues": len(report.issues),
           "findings": [(f.rule, str(f.severity), f.first_step) for f in doc.findings],
           "errors": doc.errors}
    if run["problem"] is None:
        out["false_alarms"] = [f.rule for f in alarms]
        return out
    prob = pc.PROBLEMS[run["problem"]]
    expected = prob.expected(run["framework"], run["magnitude"])
    hit = [f for f in doc.findings if f.rule == expected]
    out.update(expected=expected, recall=bool(hit), top1=bool(doc.findings) and doc.findings[0].rule == expected,
               top1_rule=doc.findings[0].rule if doc.findings else None,
               delay=(hit[0].first_step - run["onset"]) if hit and hit[0].first_step is not None else None,
               allowed_delay=prob.delay, secondary=sorted({f.rule for f in alarms if f.rule != expected}))
    out["in_time"] = out["delay"] is not None and 0 <= out["delay"] <= prob.delay
    return out


def summarise(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    per: dict[str, dict[str, Any]] = {}
    for fw in dict.fromkeys(r["framework"] for r in results):
        rs = [r for r in results if r["framework"] == fw]
        faulty = [r for r in rs if r["problem"]]
        healthy = [r for r in rs if not r["problem"]]
        per[fw] = {
            "formats": sorted({r["format"] for r in rs}),
            "problems": sorted({r["problem"] for r in faulty}),
            "faulty_runs": len(faulty), "healthy_runs": len(healthy),
            "recall": sum(r["recall"] for r in faulty) / len(faulty) if faulty else float("nan"),
            "top1": sum(r["top1"] for r in faulty) / len(faulty) if faulty else float("nan"),
            "in_time": sum(r["in_time"] for r in faulty) / len(faulty) if faulty else float("nan"),
            "max_delay": max((r["delay"] for r in faulty if r["delay"] is not None), default=None),
            "healthy_with_alarms": sum(1 for r in healthy if r["false_alarms"]),
            "rule_errors": sum(len(r["errors"]) for r in rs),
        }
    return per


def markdown(results: list[dict[str, Any]], summary: dict[str, dict[str, Any]], seconds: float) -> str:
    lines = ["# rlobs doctor on other trainers' logs (bench/doctor_eval_peers.py)", "",
             (f"{len(results)} runs, {seconds:.0f} s. Steps per run: {pc.STEPS}; onsets {pc.ONSETS}; "
             "two magnitudes per problem. Alarm = a warning or critical finding."), "",
             ("| framework | format(s) | problems | faulty runs | recall | top-1 | in time | healthy runs "
              "| healthy with alarms |"),
             "|---|---|---|---|---|---|---|---|---|"]
    for fw, s in summary.items():
        lines.append(f"| {fw} | {', '.join(s['formats'])} | {len(s['problems'])} | {s['faulty_runs']} | "
                     f"{s['recall']:.0%} | {s['top1']:.0%} | {s['in_time']:.0%} | {s['healthy_runs']} | "
                     f"{s['healthy_with_alarms']} |")
    for fw in summary:
        lines += ["", f"## {fw}", "", ("| problem | magnitude | onset | format | expected | recall | top-1 "
                                        "| delay (allowed) | top-1 found | other alarms |"),
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in results:
            if r["framework"] != fw:
                continue
            if not r["problem"]:
                lines.append(f"| healthy (seed {r['seed']}) | | | {r['format']} | (none) | | | | "
                             f"{r['findings'][0][0] if r['findings'] else 'none'} | "
                             f"{', '.join(r['false_alarms']) or 'none'} |")
                continue
            lines.append(f"| {r['problem']} | {r['magnitude']:g} | {r['onset']} | {r['format']} | {r['expected']} | "
                         f"{'yes' if r['recall'] else 'NO'} | {'yes' if r['top1'] else 'NO'} | "
                         f"{r['delay']} ({r['allowed_delay']}) | {r['top1_rule']} | {', '.join(r['secondary'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frameworks", default="", help="comma-separated (default: all)")
    ap.add_argument("--healthy", type=int, default=3, help="healthy seeds per framework and format")
    ap.add_argument("--only-healthy", action="store_true", help="healthy runs only (a false-alarm sweep)")
    ap.add_argument("--keep", default="", help="write the corpus and records here (default: a temp dir, removed)")
    ap.add_argument("--out", default=str(RESULTS / "doctor_eval_peers"), help="results path without extension")
    args = ap.parse_args(argv)
    fws = tuple(f for f in args.frameworks.split(",") if f) or None
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="rlobs-peer-eval-"))
    t0 = time.time()
    results = []
    try:
        for run in pc.runs(fws, args.healthy):
            if args.only_healthy and run["problem"]:
                continue
            res = evaluate(run, root)
            results.append(res)
            tag = "healthy" if not run["problem"] else ("ok" if res["top1"] and res["in_time"] else "MISS")
            print(f"{res['name']}: {tag} {res['findings'][:3]}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    seconds = time.time() - t0
    summary = summarise(results)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"summary": summary, "runs": results, "seconds": seconds},
                                                   indent=1, default=str) + "\n")
    md = markdown(results, summary, seconds)
    out.with_suffix(".md").write_text(md)
    print(md.split("\n## ")[0])
    ok = all((args.only_healthy or (s["recall"] == 1.0 and s["top1"] >= 0.95)) and s["healthy_with_alarms"] == 0
             for s in summary.values())
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
