"""Throughput of the three trainer modes on the long-tail workload, measured in one run.

    python bench/trainer_throughput.py [--steps 12] [--out bench/results/trainer_throughput.json]

One Ray instance and one set of actors (vLLM generator, trainer, grader pool); each mode runs
``--steps`` optimiser steps from the same initial weights with ``max_staleness=2``. The workload
has a long tail of response lengths (30% 'chain' prompts whose completions are running sums, cap
160 tokens). Reported: consumed samples/s (and tokens/s) over the training loop, the ratio to
``sync``, the staleness histogram, drops, and the held-out reward at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

WORKLOAD = dict(groups_per_step=8, group_size=8, max_tokens=160, chain_prob=0.3, max_staleness=2, lr=1e-3,
                eval_prompts=32, progress=False, grader_workers=2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--modes", default="sync,colocate_async,separate_async")
    ap.add_argument("--out", default="bench/results/trainer_throughput.json")
    args = ap.parse_args()

    import ray

    from trainer_ref.config import Config
    from trainer_ref.model_build import build_tiny, tokenizer_hash
    from trainer_ref.run import start_actors, start_ray, stop_actors, train

    root = Path("/tmp/rlobs-bench-throughput")
    model_dir = str(build_tiny())
    base = Config(run_dir=str(root / "record"), **WORKLOAD)
    start_ray(base)
    actors = start_actors(base, model_dir, {"tokenizer": tokenizer_hash(model_dir)})
    results = {}
    try:
        for mode in args.modes.split(","):
            cfg = Config(run_dir=str(root / mode), mode=mode, steps=args.steps, **WORKLOAD)
            shutil.rmtree(cfg.run_dir, ignore_errors=True)  # a fresh record per run (train refuses an old one)
            t0 = time.time()
            s = train(cfg, actors=actors, model_dir=model_dir)
            results[mode] = {k: s[k] for k in ("samples_per_s", "tokens_per_s", "train_seconds", "samples_consumed",
                                               "staleness_hist", "dropped", "max_staleness_seen")}
            results[mode]["eval_reward_end"] = s["evals"][-1]["reward_mean"]
            results[mode]["train_reward_mean"] = sum(s["reward_curve"]) / len(s["reward_curve"])
            print(f"{mode:15s} {s['samples_per_s']:7.1f} samples/s {s['tokens_per_s']:8.1f} tok/s "
                  f"train {s['train_seconds']:.1f}s (wall {time.time() - t0:.1f}s) staleness {s['staleness_hist']} "
                  f"dropped {s['dropped']} eval {s['evals'][-1]['reward_mean']:.3f}", flush=True)
    finally:
        stop_actors(actors)
        ray.shutdown()
    if "sync" in results:
        for m in results:
            results[m]["speedup_vs_sync"] = results[m]["samples_per_s"] / results["sync"]["samples_per_s"]
    out = {"workload": WORKLOAD, "steps": args.steps, "cpus": os.cpu_count(), "results": results,
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    for m, r in results.items():
        print(f"{m}: {r.get('speedup_vs_sync', 0):.2f}x sync")


if __name__ == "__main__":
    main()
