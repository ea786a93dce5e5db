"""Learning: held-out mean reward before and after a short GRPO run on CPU, twice with the same seed.

    python bench/trainer_learning.py [--mode sync] [--steps 60] [--repeats 2] [--lr 2e-3]

Each repeat is a fresh ``python -m trainer_ref.run``-equivalent run (own Ray, own actors) with the
same seed; the held-out reward is exact-match success on 64 unseen prompts x 4 samples (T = 1).
The claim checked and saved: the held-out reward rises by at least ``--margin`` in every repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="sync")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--margin", type=float, default=0.1)
    ap.add_argument("--out", default="bench/results/trainer_learning.json")
    args = ap.parse_args()

    import ray

    from trainer_ref.config import Config
    from trainer_ref.run import train

    runs = []
    for r in range(args.repeats):
        cfg = Config(mode=args.mode, steps=args.steps, seed=args.seed, lr=args.lr, progress=False,
                     run_dir=f"/tmp/rlobs-bench-learning/{args.mode}-seed{args.seed}-rep{r}", eval_every=max(1, args.steps // 3))
        t0 = time.time()
        s = train(cfg)
        ray.shutdown()
        ev = s["evals"]
        runs.append({"evals": ev, "reward_curve": s["reward_curve"], "train_seconds": s["train_seconds"],
                     "wall_seconds": time.time() - t0, "rise": ev[-1]["reward_mean"] - ev[0]["reward_mean"],
                     "run_dir": cfg.run_dir})
        print(f"repeat {r}: held-out {ev[0]['reward_mean']:.3f} -> {ev[-1]['reward_mean']:.3f} "
              f"(evals {[round(e['reward_mean'], 3) for e in ev]}) train {s['train_seconds']:.0f}s", flush=True)
    res = {"mode": args.mode, "steps": args.steps, "seed": args.seed, "lr": args.lr, "margin": args.margin,
           "runs": runs, "all_rise_by_margin": all(x["rise"] >= args.margin for x in runs),
           "same_seed_same_curve": len({json.dumps(x["reward_curve"]) for x in runs}) == 1}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k != "runs"}))


if __name__ == "__main__":
    main()
