"""Learning: held-out mean reward before and after a short GRPO run on CPU, repeated with the same seed.

    python bench/trainer_learning.py [--modes sync,separate_async] [--steps 150] [--repeats 2] [--lr 3e-4]
    python bench/trainer_learning.py --model smollm2 --modes sync --repeats 1 --steps 16 --groups-per-step 4 \
        --group-size 4 --max-tokens 16 --eval-prompts 32 --margin 0.1 --target 0.75

Each repeat is a fresh ``python -m trainer_ref.run``-equivalent run (own Ray, own actors) with the
same seed; the held-out reward is exact-match success on 64 unseen prompts x 4 samples (T = 1).
The model is the ``tiny-packed`` warm start (``trainer_ref.model_build.PRESETS``: it knows the sums
but rarely stops after its answer). ``--model smollm2``: SmolLM2-135M-Instruct on its own task (``echo``: "Repeat 417" -> "#417" with two
demonstrations as chat turns; held-out prompts from another seed), at the model's learning rate
(``trainer_ref.config.REAL_LR``) unless ``--lr`` is given. The claims checked and saved: in every mode and repeat the
held-out reward rises by at least ``--margin`` and ends at or above ``--target``; and the repeats of a
mode end within ``--tolerance`` of each other (a sync run is also compared curve for curve).
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="sync,separate_async")
    ap.add_argument("--model", default="tiny-packed")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=None, help="default: 3e-4 for tiny-packed, the model's for others")
    ap.add_argument("--groups-per-step", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--eval-prompts", type=int, default=64)
    ap.add_argument("--eval-every", type=int, default=0, help="default: steps // 5")
    ap.add_argument("--margin", type=float, default=0.4)
    ap.add_argument("--target", type=float, default=0.6)
    ap.add_argument("--tolerance", type=float, default=0.1)
    ap.add_argument("--out", default="", help="default bench/results/trainer_learning[_MODEL].json")
    args = ap.parse_args()
    if args.lr is None and args.model == "tiny-packed":
        args.lr = 3e-4
    out = args.out or f"bench/results/trainer_learning{'' if args.model == 'tiny-packed' else '_' + Path(args.model).name}.json"

    import ray

    from trainer_ref.config import Config
    from trainer_ref.run import train

    runs = []
    for mode in args.modes.split(","):
        for r in range(args.repeats):
            cfg = Config(mode=mode, model=args.model, steps=args.steps, seed=args.seed, lr=args.lr or 0.0, progress=False,
                         deterministic=True, run_dir=f"/tmp/rlobs-bench-learning/{Path(args.model).name}-{mode}-seed{args.seed}-rep{r}",
                         eval_every=args.eval_every or max(1, args.steps // 5), groups_per_step=args.groups_per_step,
                         group_size=args.group_size, max_tokens=args.max_tokens, eval_prompts=args.eval_prompts)
            shutil.rmtree(cfg.run_dir, ignore_errors=True)  # a fresh record per run (train refuses an old one)
            t0 = time.time()
            s = train(cfg)
            ray.shutdown()
            ev = s["evals"]
            first, last = ev[0]["reward_mean"], ev[-1]["reward_mean"]
            runs.append({"mode": mode, "repeat": r, "evals": ev, "reward_curve": s["reward_curve"], "lr": cfg.lr, "task": cfg.task,
                         "train_seconds": s["train_seconds"], "wall_seconds": time.time() - t0,
                         "start": first, "end": last, "rise": last - first, "run_dir": cfg.run_dir})
            print(f"{mode} repeat {r}: held-out {first:.3f} -> {last:.3f} "
                  f"(evals {[round(e['reward_mean'], 3) for e in ev]}) train {s['train_seconds']:.0f}s", flush=True)
    by_mode: dict[str, list[dict]] = {}
    for x in runs:
        by_mode.setdefault(x["mode"], []).append(x)
    res = {"model": args.model, "modes": list(by_mode), "steps": args.steps, "seed": args.seed, "lr": runs[0]["lr"],
           "task": runs[0]["task"], "groups_per_step": args.groups_per_step, "group_size": args.group_size,
           "max_tokens": args.max_tokens, "eval_prompts": args.eval_prompts,
           "margin": args.margin, "target": args.target, "tolerance": args.tolerance, "runs": runs,
           "all_rise_by_margin": all(x["rise"] >= args.margin for x in runs),
           "all_reach_target": all(x["end"] >= args.target for x in runs),
           "repeats_agree": all(max(x["end"] for x in rs) - min(x["end"] for x in rs) <= args.tolerance
                                for rs in by_mode.values()),
           "same_seed_same_curve": {m: len({json.dumps(x["reward_curve"]) for x in rs}) == 1
                                    for m, rs in by_mode.items()}}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k != "runs"}))


if __name__ == "__main__":
    main()
