"""Same-session throughput of trainer_ref before and after the orchestrator split (issue 19), run alternately.

    python bench/trainer_split_compare.py [--ref f3b7d17] [--steps 20] [--rounds 2]
        [--modes sync,colocate_async,separate_async] [--out bench/results/trainer_split_compare.json]

``--ref`` is the last commit before the split (f3b7d17: orchestrator.py one 646-line file). It is checked out
into a detached git worktree beside this one; each run is one ``python -m trainer_ref.run`` process started
in that tree (``PYTHONPATH`` = the tree, so the driver and its Ray workers import that tree's trainer_ref,
probes and rlobs) or in this one, on the same workload (the long-tail one of bench/trainer_throughput.py) and
seed. Order per round and mode: ref then head, the next round head then ref, so a machine that slows down
over the session does not favour one side. Reported per mode: consumed samples/s and tokens/s of each run
(the training loop only: the runs' own ``summary.json``), the median of each side and head / ref. Ratios
within a few percent of 1 on this shared 2-core machine are noise; the per-run values show the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ["--model", "tiny-packed", "--lr", "3e-4", "--groups-per-step", "8", "--group-size", "8",
            "--max-tokens", "160", "--chain-prob", "0.3", "--max-staleness", "2", "--grader-workers", "2",
            "--no-progress", "--eval-prompts", "16"]


def worktree(ref: str) -> Path:
    """A detached worktree of ``ref`` (reused when it is already there)."""
    sha = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"rlobs-ref-{sha}"
    if not (path / "trainer_ref").is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", "--force", str(path), sha], cwd=ROOT, check=True,
                       capture_output=True)
    return path


def one_run(tree: Path, mode: str, steps: int, seed: int, out: Path) -> dict[str, float]:
    run_dir = out / f"{tree.name}-{mode}-{time.time_ns()}"
    env = {**os.environ, "PYTHONPATH": str(tree), "VLLM_CPU_KVCACHE_SPACE": "1"}
    cmd = [sys.executable, "-m", "trainer_ref.run", "--mode", mode, "--steps", str(steps), "--seed", str(seed),
           "--run-dir", str(run_dir), *WORKLOAD]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"{tree} {mode}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    s = json.loads((run_dir / "summary.json").read_text())
    return {"samples_per_s": s["samples_per_s"], "tokens_per_s": s["tokens_per_s"],
            "train_seconds": s["train_seconds"], "process_seconds": time.time() - t0,
            "load_avg_1m": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ref", default="f3b7d17", help="the commit before the split")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default="sync,colocate_async,separate_async")
    ap.add_argument("--out", default=str(ROOT / "bench/results/trainer_split_compare.json"))
    a = ap.parse_args(argv)
    ref_tree = worktree(a.ref)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()
    sides = {"ref": ref_tree, "head": ROOT}
    runs: dict[str, dict[str, list[dict[str, float]]]] = {m: {"ref": [], "head": []} for m in a.modes.split(",")}
    with tempfile.TemporaryDirectory(prefix="rlobs-split-") as tmp:
        for r in range(a.rounds):
            for mode in runs:
                for side in (("ref", "head") if r % 2 == 0 else ("head", "ref")):
                    res = one_run(sides[side], mode, a.steps, a.seed, Path(tmp))
                    runs[mode][side].append(res)
                    print(f"round {r + 1} {mode:15s} {side:4s} {res['samples_per_s']:7.2f} samples/s "
                          f"{res['tokens_per_s']:8.1f} tokens/s (load {res['load_avg_1m']:.1f})", flush=True)
    table = {}
    for mode, by in runs.items():
        med = {side: {k: statistics.median(x[k] for x in by[side]) for k in ("samples_per_s", "tokens_per_s")}
               for side in by}
        table[mode] = {"ref": med["ref"], "head": med["head"],
                       "head_vs_ref_samples_per_s": med["head"]["samples_per_s"] / med["ref"]["samples_per_s"],
                       "head_vs_ref_tokens_per_s": med["head"]["tokens_per_s"] / med["ref"]["tokens_per_s"],
                       "runs": by}
    result = {"ref": a.ref, "head": head, "steps": a.steps, "rounds": a.rounds, "seed": a.seed,
              "workload": WORKLOAD, "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
              "modes": table}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1))
    print(f"\n{'mode':15s} {'ref samples/s':>14s} {'head samples/s':>15s} {'head/ref':>9s} {'tokens/s head/ref':>18s}")
    for mode, t in table.items():
        print(f"{mode:15s} {t['ref']['samples_per_s']:14.2f} {t['head']['samples_per_s']:15.2f} "
              f"{t['head_vs_ref_samples_per_s']:9.2f} {t['head_vs_ref_tokens_per_s']:18.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
