"""Throughput and time-to-target of the trainer modes on the long-tail workload, measured in one run.

    python bench/trainer_throughput.py [--steps 40] [--target 0.6] [--eval-every 5]
        [--modes sync,colocate_async,separate_async,separate_async+completion]

One Ray instance and one set of actors (vLLM generator, trainer, grader pool); each mode trains the
``tiny-packed`` warm start (``--model tiny-packed --lr 3e-4``, the learning setting of
bench/trainer_learning.py) from the same initial weights on the long-tail workload (30% 'chain'
prompts whose completions are running sums, cap 160 tokens), ``max_staleness=2``.

Per mode:

* consumed samples/s and tokens/s over the training loop (held-out evaluations excluded), and their
  ratio to ``sync``;
* dropped samples by reason, the dropped share of everything graded, and the mean completion length
  of dropped vs consumed samples (from the run's ledger: where async "wins" by throwing the long
  tail away, this ratio says so);
* time to target: wall-clock from the start of training until the held-out exact-match success
  (``--eval-prompts`` unseen prompts x 4 samples, every ``--eval-every`` steps) first reaches
  ``--target`` (``wall_s``; ``train_s`` without the evaluation pauses); ``null`` if it never does within
  ``--steps``. Samples/s and tokens/s leave the evaluation pauses out (the async modes keep generating
  during them, which flatters them a little).

``separate_async+completion`` is separate_async with ``staleness_basis=completion``: the staleness bound
is checked on the newest version that wrote a group's tokens, so long groups resumed across weight
syncs (``interrupt=resume``) are kept and importance-corrected instead of dropped as stale.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

WORKLOAD = dict(model="tiny-packed", lr=3e-4, groups_per_step=8, group_size=8, max_tokens=160, chain_prob=0.3,
                max_staleness=2, progress=False, grader_workers=2)
VARIANTS = {"separate_async+completion": dict(mode="separate_async", staleness_basis="completion")}


def ledger_lengths(run_dir: str) -> dict[str, Any]:
    """Dropped samples by reason and the mean completion length of dropped vs consumed ones (driver ledger)."""
    from rlobs.store import open_run

    rec = open_run(run_dir)
    rows = rec.sql("SELECT state, reason, count(*), avg(tokens) FROM ledger WHERE component = 'driver' "
                   "AND state IN ('consumed', 'dropped') GROUP BY 1, 2").fetchall()
    consumed = [(n, t) for st, _, n, t in rows if st == "consumed"]
    dropped = {r: {"samples": n, "mean_tokens": t} for st, r, n, t in rows if st == "dropped"}
    n_c = sum(n for n, _ in consumed)
    n_d = sum(d["samples"] for d in dropped.values())
    mean_c = sum(n * (t or 0) for n, t in consumed) / n_c if n_c else None
    mean_d = sum(d["samples"] * (d["mean_tokens"] or 0) for d in dropped.values()) / n_d if n_d else None
    return {"dropped_by_reason": dropped, "dropped_share": n_d / (n_c + n_d) if n_c + n_d else 0.0,
            "mean_tokens_consumed": mean_c, "mean_tokens_dropped": mean_d,
            "dropped_to_consumed_length": mean_d / mean_c if mean_d is not None and mean_c else None}


def time_to_target(s: dict[str, Any], target: float) -> dict[str, Any]:
    """Seconds from the start of training until the held-out success first reaches ``target``: ``wall_s``
    counts the evaluation pauses before it (the async modes keep generating during them), ``train_s``
    leaves them out."""
    t0 = s["t_train_start"]
    for e, t in zip(s["evals"], s["eval_times"]):
        if e["reward_mean"] >= target and t["t"] >= t0:
            paused = sum(x["seconds"] for x in s["eval_times"] if t0 <= x["t"] < t["t"])
            return {"wall_s": t["t"] - t0, "train_s": t["t"] - t0 - paused, "step": e["step"],
                    "reward": e["reward_mean"]}
    return {"wall_s": None, "train_s": None, "step": None,
            "reward": max((e["reward_mean"] for e in s["evals"]), default=None)}


def run_mode(name: str, args: argparse.Namespace, actors: Any, model_dir: str, root: Path) -> dict[str, Any]:
    from trainer_ref.config import Config
    from trainer_ref.run import train

    over = {"mode": name, **VARIANTS.get(name, {})}
    cfg = Config(run_dir=str(root / name.replace("+", "_")), steps=args.steps, eval_every=args.eval_every,
                 eval_prompts=args.eval_prompts, **{**WORKLOAD, **over})
    shutil.rmtree(cfg.run_dir, ignore_errors=True)  # a fresh record per run (train refuses an old one)
    s = train(cfg, actors=actors, model_dir=model_dir)
    paused = sum(x["seconds"] for x in s["eval_times"] if x["t"] >= s["t_train_start"])
    loop_s = s["train_seconds"] - paused
    tokens = s["tokens_per_s"] * s["train_seconds"]
    r = {"config": over, "steps": s["steps"], "train_seconds": s["train_seconds"], "eval_seconds": paused,
         "samples_consumed": s["samples_consumed"], "samples_per_s": s["samples_consumed"] / loop_s,
         "tokens_per_s": tokens / loop_s, "staleness_hist": s["staleness_hist"], "dropped": s["dropped"],
         "evals": [(e["step"], round(e["reward_mean"], 3)) for e in s["evals"]],
         "time_to_target": time_to_target(s, args.target), **ledger_lengths(cfg.run_dir)}
    print(f"{name:26s} {r['samples_per_s']:6.1f} samples/s {r['tokens_per_s']:7.1f} tok/s "
          f"dropped {r['dropped_share']:.1%} (len ratio {r['dropped_to_consumed_length']}) "
          f"to {args.target}: {r['time_to_target']} evals {r['evals']}", flush=True)
    return r


def save(args: argparse.Namespace, results: dict[str, Any]) -> None:
    out = {"workload": WORKLOAD, "steps": args.steps, "target": args.target, "eval_every": args.eval_every,
           "eval_prompts": args.eval_prompts, "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
           "results": results, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--target", type=float, default=0.6, help="held-out success to reach")
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--eval-prompts", type=int, default=32)
    ap.add_argument("--modes", default="sync,colocate_async,separate_async,separate_async+completion")
    ap.add_argument("--out", default="bench/results/trainer_throughput.json")
    args = ap.parse_args()

    import ray

    from trainer_ref.config import Config
    from trainer_ref.model_build import tokenizer_hash
    from trainer_ref.run import resolve_model, start_actors, start_ray, stop_actors

    root = Path("/tmp/rlobs-bench-throughput")
    base = Config(run_dir=str(root / "record"), **WORKLOAD)
    model_dir = resolve_model(base)
    start_ray(base)
    actors = start_actors(base, model_dir, {"tokenizer": tokenizer_hash(model_dir)})
    results: dict[str, Any] = {}
    try:
        for name in args.modes.split(","):
            results[name] = run_mode(name, args, actors, model_dir, root)
            save(args, results)  # a partial table survives an interrupted run
    finally:
        stop_actors(actors)
        ray.shutdown()
    if "sync" in results:
        sync = results["sync"]
        for r in results.values():
            r["samples_per_s_vs_sync"] = r["samples_per_s"] / sync["samples_per_s"]
            r["tokens_per_s_vs_sync"] = r["tokens_per_s"] / sync["tokens_per_s"]
            for k in ("wall_s", "train_s"):
                a, b = sync["time_to_target"][k], r["time_to_target"][k]
                r[f"time_to_target_{k}_speedup_vs_sync"] = a / b if a and b else None
    save(args, results)
    for m, r in results.items():
        print(f"{m}: {r.get('samples_per_s_vs_sync', 0):.2f}x sync samples/s, {r.get('tokens_per_s_vs_sync', 0):.2f}x "
              f"tokens/s, time to {args.target}: {r.get('time_to_target_wall_s_speedup_vs_sync')}x wall-clock, "
              f"{r.get('time_to_target_train_s_speedup_vs_sync')}x without the evaluation pauses")


if __name__ == "__main__":
    main()
