"""How far each of a run's first optimiser steps moves the policy, across models: data for the first-steps leg
of ``precursor-oversized-updates`` (issue 18), which reads that size in absolute nats/token and was chosen on
``tiny-packed`` alone.

    python bench/first_steps.py record --root DIR [--tiny-seeds 1500,1600] [--lr-seeds 40-59] [--steps 12]
    python bench/first_steps.py table --root DIR [--out bench/results/first_steps.json]

``record`` re-trains only the first ``--steps`` steps (the learning rate is constant, so they are the full run's
first steps): doctor_calib's healthy ``tiny`` runs of each 40-seed block (every mode, their shapes and lr; the
shared Stack, like ``bench/doctor_calib.py``) and ``bench/early_warning.py``'s lr-too-high runs (``tiny-packed``,
sync --deterministic: the identical runs). ``table`` writes, per run, the per-step update KL
(``train_step.policy_kl``) and entropy, the run's lr, and what the committed first-steps leg says on them. Nothing here is a
verdict: the seeds it reads have all been looked at (calibration data for the next registered run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _seeds(spec: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, spec.split(",")):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return out


def tiny_plan(blocks: list[int], steps: int) -> list[dict]:
    """doctor_calib's healthy held-out runs of each 40-seed block starting at ``blocks``, capped at ``steps``."""
    from bench import doctor_calib as dc

    dc.full = True
    out = []
    for base in blocks:
        dc.FRESH_SEEDS = range(base, base + 40)
        for spec in dc.plan("heldout"):
            if not spec["fault"] and spec["seed"] in dc.FRESH_SEEDS:
                out.append({**spec, "full_steps": spec["steps"], "steps": min(spec["steps"], steps)})
    return out


def record(root: Path, blocks: list[int], lr_seeds: list[int], steps: int) -> None:
    from bench import doctor_calib as dc
    from bench import early_warning as ew

    lr_runs = [e for e in ew.matrix(["lr-too-high"]) if e["seed"] in lr_seeds]
    (root / "tiny-packed").mkdir(parents=True, exist_ok=True)
    for e in lr_runs:
        info = ew.train(e, root / "tiny-packed", steps)
        print(json.dumps({k: info[k] for k in ("name", "rc", "seconds")}), flush=True)
    todo = [s for s in tiny_plan(blocks, steps) if not (root / "tiny" / s["name"] / "done").is_file()]
    if not todo:
        return
    stack = dc.Stack(root / "tiny")
    try:
        for spec in todo:
            info = dc.run_spec(stack, root / "tiny", spec)
            (root / "tiny" / spec["name"] / "done").write_text(json.dumps({**spec, **info}))
            print(json.dumps({"name": spec["name"], **info}), flush=True)
    finally:
        stack.close()


def _row(run_dir: Path, what: dict) -> dict:
    """Per-step update KL and entropy of one record, the run's lr (its manifest), the median and the count over the
    committed leg's bar in the leg's first window, and the step the committed rule first warns at."""
    import rlobs
    from rlobs.doctor.context import RunContext
    from rlobs.doctor.model import registry
    from rlobs.doctor.rules.precursors import OVERSIZED, replay, series

    th = registry()[OVERSIZED].thresholds
    bar, w = th["early_kl_above"], int(th["early_window"])
    with rlobs.open_run(run_dir) as rec:
        ctx = RunContext(rec)
        kl, ent = series(ctx, "policy_kl"), dict(series(ctx, "entropy"))
        first = replay(ctx, [OVERSIZED])[OVERSIZED]
    vals = [v for _, v in kl]
    lr = json.loads((run_dir / "manifest.json").read_text())["config"]["lr"]
    return {**what, "lr": lr, "policy_kl": [round(v, 5) for v in vals],
            "entropy": [round(ent.get(s, float("nan")), 4) for s, _ in kl], "early_kl_above": bar, "early_window": w,
            "median_first_window": round(statistics.median(vals[:w]), 5) if len(vals) >= w else None,
            "over_bar_first_window": sum(v > bar for v in vals[:w]), "committed_leg_first_step": first}


def table(root: Path, out: Path) -> None:
    rows = []
    for d in sorted((root / "tiny").glob("*/done")):
        spec = json.loads(d.read_text())
        rows.append(_row(d.parent, {"model": "tiny", "name": spec["name"], "seed": spec["seed"], "mode": spec["mode"],
                                    "full_steps": spec["full_steps"]}))
    for d in sorted((root / "tiny-packed").glob("*/early_warning_run.json")):
        info = json.loads(d.read_text())
        rows.append(_row(d.parent, {"model": "tiny-packed", "name": info["name"], "seed": info["seed"],
                                    "class": info["class"]}))
    out.write_text(json.dumps({"source": "bench/first_steps.py (first steps re-trained, trainer_ref, no fault)",
                               "runs": rows}, indent=1))
    for r in rows:
        print(f"{r['model']:12s} {r['name']:42s} lr {r['lr']:<7g} median {r['median_first_window']!s:8s} "
              f"over {r['early_kl_above']:g}: {r['over_bar_first_window']:2d} leg {r['committed_leg_first_step']}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--root", type=Path, required=True)
    r.add_argument("--tiny-seeds", default="1500,1600", help="doctor_calib 40-seed blocks (their first seeds)")
    r.add_argument("--lr-seeds", default="40-59", help="bench/early_warning.py lr-too-high seeds")
    r.add_argument("--steps", type=int, default=12)
    t = sub.add_parser("table")
    t.add_argument("--root", type=Path, required=True)
    t.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "first_steps.json")
    a = p.parse_args()
    if a.cmd == "record":
        record(a.root, _seeds(a.tiny_seeds), _seeds(a.lr_seeds), a.steps)
    else:
        table(a.root, a.out)


if __name__ == "__main__":
    main()
