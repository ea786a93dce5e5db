"""Evaluation corpus for the doctor on other trainers' logs: per framework, healthy runs and every problem that
framework's logged metrics can reveal, at two magnitudes and two onsets, with realistic noise.

Each run is a per-step series of what a GRPO-style run logs (grad norm with log-normal noise, slowly falling
entropy, rising reward, timings, parity gaps, staleness, ...), named as the framework names it (the metric maps
in ``rlobs/importers/<framework>.py``, read from each project's source) and written in the format that
framework really writes, by the real library where it installs here:

    verl      FileLogger JSONL ({"step", "data"}; verl is not installable here, the format is its FileLogger's)
              and, for the same runs, TensorBoard event files from torch's SummaryWriter
    trl       trainer_state.json written by transformers' TrainerState.save_to_json (what GRPOTrainer saves)
    openrlhf  TensorBoard (SummaryWriter, ``train/`` prefix, as OpenRLHF's TensorboardLogger)
    areal     TensorBoard (SummaryWriter)
    slime     TensorBoard (SummaryWriter, ``train/step`` / ``rollout/step``)
    nemo-rl   TensorBoard (SummaryWriter, ``train/`` and ``timing/train/`` names)
    prime-rl  wandb run file written by the wandb SDK in offline mode (prime-rl logs to wandb)
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

STEPS = 100
ONSETS = (35, 65)


@dataclass(frozen=True)
class Problem:
    name: str
    magnitudes: tuple[float, ...]
    delay: int  # allowed onset-to-detection delay, steps
    expected: Callable[[str, float], str]  # (framework, magnitude) -> expected top-1 rule


def _fixed(rule: str) -> Callable[[str, float], str]:
    return lambda fw, mag: rule


PROBLEMS: dict[str, Problem] = {
    "grad_spike": Problem("grad_spike", (20.0, 100.0), 0, _fixed("grad-norm-spike")),
    "nan_grad": Problem("nan_grad", (1.0,), 0, _fixed("grad-norm-nonfinite")),
    "no_gradient": Problem("no_gradient", (2.0, 6.0), 0, _fixed("no-gradient")),
    "entropy_collapse": Problem("entropy_collapse", (0.1, 0.03), 12, _fixed("entropy-collapse")),
    "clip_ratio": Problem("clip_ratio", (0.35, 0.6), 6, _fixed("response-length-clipped")),
    "parity_jump": Problem("parity_jump", (4.0, 10.0), 1,
                           lambda fw, mag: "parity-drift" if fw in ("trl", "slime") else "parity-prob-drift"),
    "grading_slow": Problem("grading_slow", (15.0, 30.0), 1, _fixed("grading-dominates-step")),
    "trainer_idle": Problem("trainer_idle", (0.6, 0.85), 1, _fixed("trainer-idle")),
    "staleness": Problem("staleness", (2.0, 6.0), 10,
                         lambda fw, mag: "staleness-over-bound" if mag > 4 else "staleness-growing"),
    "zero_std": Problem("zero_std", (0.85, 0.97), 1, _fixed("advantage-zero-std-groups")),
    "data_wait": Problem("data_wait", (6.0, 12.0), 2, _fixed("trainer-starved")),
    "adv_spike": Problem("adv_spike", (15.0, 50.0), 0, _fixed("advantage-denominator-collapse")),
}

# framework -> (problems its metrics reveal, canonical quantity -> logged name)
FRAMEWORKS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "verl": (("grad_spike", "nan_grad", "no_gradient", "entropy_collapse", "clip_ratio", "parity_jump",
              "grading_slow", "trainer_idle", "staleness", "adv_spike"), {
        "grad_norm": "actor/grad_norm", "loss": "actor/pg_loss", "entropy": "actor/entropy", "lr": "actor/lr",
        "reward": "critic/score/mean", "clip": "response_length/clip_ratio", "len_mean": "response_length/mean",
        "len_max": "response_length/max", "dprob": "training/rollout_probs_diff_mean",
        "dprob_max": "training/rollout_probs_diff_max", "t_gen": "timing_s/gen", "t_reward": "timing_s/reward",
        "t_update": "timing_s/update_actor", "t_step": "timing_s/step", "idle": "trainer/idle_ratio",
        "rollouter_idle": "fully_async/rollouter/idle_ratio",
        "stale_mean": "training/off_policy/trajectory_staleness/mean",
        "stale_max": "training/off_policy/trajectory_staleness/max", "adv_max": "critic/advantages/max",
        "adv_min": "critic/advantages/min", "clipfrac": "actor/pg_clipfrac", "ppo_kl": "actor/ppo_kl"}),
    "trl": (("grad_spike", "nan_grad", "no_gradient", "entropy_collapse", "clip_ratio", "parity_jump", "zero_std"), {
        "grad_norm": "grad_norm", "loss": "loss", "entropy": "entropy", "lr": "learning_rate", "reward": "reward",
        "reward_std": "reward_std", "clip": "completions/clipped_ratio", "len_mean": "completions/mean_length",
        "len_max": "completions/max_length", "dlogp": "sampling/sampling_logp_difference/mean",
        "dlogp_max": "sampling/sampling_logp_difference/max", "zero_std": "frac_reward_zero_std",
        "t_step": "step_time", "kl": "kl"}),
    "openrlhf": (("entropy_collapse", "parity_jump"), {
        "loss": "train/policy_loss", "entropy": "train/entropy_loss", "lr": "train/actor_lr", "reward": "train/reward",
        "len_mean": "train/response_length", "kl_gen": "train/vllm_kl", "ppo_kl": "train/ppo_kl",
        "clipfrac": "train/ppo_clip_ratio"}),
    "areal": (("grad_spike", "nan_grad", "no_gradient", "entropy_collapse", "clip_ratio", "parity_jump"), {
        "grad_norm": "ppo_actor/update/grad_norm", "loss": "ppo_actor/update/actor_loss/avg",
        "entropy": "ppo_actor/update/entropy/avg", "lr": "ppo_actor/update/lr", "reward": "ppo_actor/task_reward/avg",
        "clip": "ppo_actor/no_eos_ratios/avg", "len_mean": "ppo_actor/seq_len/avg",
        "kl_gen": "ppo_actor/update/behave_approx_kl/avg", "clipfrac": "ppo_actor/update/clip_ratio/avg"}),
    "slime": (("grad_spike", "nan_grad", "no_gradient", "entropy_collapse", "clip_ratio", "parity_jump",
               "trainer_idle", "data_wait"), {
        "grad_norm": "train/grad_norm", "loss": "train/loss", "entropy": "train/entropy_loss",
        "reward": "rollout/raw_reward", "clip": "rollout/truncated_ratio", "len_mean": "rollout/response_len/mean",
        "dlogp": "train/train_rollout_logprob_abs_diff", "t_step": "perf/step_time", "data_wait": "perf/train_wait_time",
        "idle": "perf/wait_time_ratio", "t_update": "perf/actor_train_time", "clipfrac": "train/pg_clipfrac"}),
    "nemo-rl": (("grad_spike", "nan_grad", "no_gradient", "entropy_collapse", "parity_jump", "adv_spike"), {
        "grad_norm": "train/grad_norm", "loss": "train/loss", "entropy": "train/approx_entropy", "lr": "train/lr",
        "reward": "train/reward", "kl_gen": "train/gen_kl_error", "len_mean": "train/mean_gen_tokens_per_sample",
        "t_step": "timing/train/total_step_time", "t_gen": "timing/train/generation",
        "t_update": "timing/train/policy_training", "adv_max": "train/advantages/max",
        "adv_min": "train/advantages/min"}),
    "prime-rl": (("grad_spike", "nan_grad", "no_gradient", "entropy_collapse", "clip_ratio", "parity_jump",
                  "staleness", "data_wait"), {
        "grad_norm": "optim/grad_norm", "lr": "optim/lr", "loss": "loss/mean", "entropy": "entropy/all/mean",
        "reward": "reward/mean", "kl_gen": "mismatch_kl/all/mean", "t_step": "time/step",
        "data_wait": "time/wait_for_batch", "stale_mean": "off_policy/mean", "stale_max": "off_policy/max",
        "clip": "is_truncated/mean", "len_mean": "num_output_tokens/mean"}),
}


def healthy(seed: int, steps: int = STEPS) -> list[dict[str, float]]:
    """Canonical per-step quantities of a healthy run: trends plus realistic noise."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(1, steps + 1):
        f = s / steps
        t_gen = 30.0 * math.exp(rng.normal(0, 0.08)) * (1 + 0.2 * f)
        t_reward = 3.0 * math.exp(rng.normal(0, 0.15))
        t_update = 15.0 * math.exp(rng.normal(0, 0.05))
        t_step = t_gen + t_reward + t_update + 2.0
        adv = 2.5 * math.exp(rng.normal(0, 0.1))
        stale_max = float(rng.choice([1, 1, 2]))
        out.append({
            "grad_norm": 0.3 * math.exp(rng.normal(0, 0.15)) * (1 + 0.2 * math.sin(s / 7)),
            "loss": float(rng.normal(0, 0.02)), "lr": 1e-6,
            "entropy": 1.1 * (1 - 0.35 * f) * math.exp(rng.normal(0, 0.04)),
            "reward": 0.3 + 0.3 * f + float(rng.normal(0, 0.03)), "reward_std": 0.35 + float(rng.normal(0, 0.03)),
            "clip": float(np.clip(0.03 + rng.normal(0, 0.01), 0, 1)),
            "len_mean": 400 + 100 * f + float(rng.normal(0, 20)), "len_max": 1024.0,
            "dprob": 0.003 * math.exp(rng.normal(0, 0.15)), "dprob_max": 0.4 * math.exp(rng.normal(0, 0.2)),
            "dlogp": 0.002 * math.exp(rng.normal(0, 0.15)), "dlogp_max": 0.3 * math.exp(rng.normal(0, 0.2)),
            "kl_gen": 3e-4 * math.exp(rng.normal(0, 0.25)), "kl": 1e-3 * (1 + f),
            "t_gen": t_gen, "t_reward": t_reward, "t_update": t_update, "t_step": t_step,
            "idle": float(np.clip(0.15 + rng.normal(0, 0.04), 0, 1)),
            "rollouter_idle": float(np.clip(0.1 + rng.normal(0, 0.04), 0, 1)),
            "stale_mean": max(0.0, 0.6 + float(rng.normal(0, 0.08))), "stale_max": stale_max,
            "zero_std": float(np.clip(0.15 + 0.2 * f + rng.normal(0, 0.04), 0, 1)),
            "data_wait": 2.0 * math.exp(rng.normal(0, 0.15)),
            "adv_max": adv, "adv_min": -adv * math.exp(rng.normal(0, 0.1)),
            "clipfrac": 0.002 * math.exp(rng.normal(0, 0.3)), "ppo_kl": 1e-4 * math.exp(rng.normal(0, 0.3)),
        })
    return out


def plant(rows: list[dict[str, float]], problem: str, mag: float, onset: int) -> None:
    """Change the run from step ``onset`` (1-based) on, in place."""
    for s, r in enumerate(rows, 1):
        k = s - onset
        if k < 0:
            continue
        if problem == "grad_spike" and k == 0:
            r["grad_norm"] *= mag
        elif problem == "nan_grad" and k == 0:
            r["grad_norm"] = float("nan")
        elif problem == "no_gradient" and k < mag:
            r["grad_norm"] = 0.0
        elif problem == "entropy_collapse":
            r["entropy"] *= max(mag, math.exp(-k / 3))  # falls over ~10 steps to mag x
        elif problem == "clip_ratio":
            r["clip"] = min(1.0, r["clip"] + (mag - 0.03) * min(1.0, (k + 1) / 4))
            r["len_mean"] *= 1 + mag
        elif problem == "parity_jump":
            for q in ("dprob", "dlogp", "kl_gen"):
                r[q] *= mag
        elif problem == "grading_slow":
            r["t_reward"] *= mag
            r["t_step"] = r["t_gen"] + r["t_reward"] + r["t_update"] + 2.0
        elif problem == "trainer_idle":
            r["idle"] = float(np.clip(mag + (r["idle"] - 0.15), 0, 1))
        elif problem == "staleness":
            grow = mag * min(1.0, (k + 1) / 8)
            r["stale_mean"] += grow
            r["stale_max"] = float(round(r["stale_max"] + grow))
        elif problem == "zero_std":
            r["zero_std"] = float(np.clip(mag + (r["zero_std"] - 0.25) * 0.2, 0, 1))
        elif problem == "data_wait":
            r["data_wait"] *= mag
        elif problem == "adv_spike" and k == 0:
            r["adv_max"] *= mag
            r["grad_norm"] *= 8  # the spike the huge advantages cause


def named(rows: list[dict[str, float]], names: dict[str, str]) -> list[dict[str, float]]:
    return [{names[q]: v for q, v in r.items() if q in names} for r in rows]


# ---- writers: each framework's real format ----
def write_verl_jsonl(path: Path, rows: list[dict[str, float]]) -> Path:
    """verl's FileLogger line: {"step": N, "data": {...}} (JSON NaN allowed, as json.dumps writes it)."""
    with path.open("w") as fh:
        for s, r in enumerate(rows, 1):
            fh.write(json.dumps({"step": s, "data": {**r, "training/global_step": s}}) + "\n")
    return path


def write_tensorboard(folder: Path, rows: list[dict[str, float]], *, step_keys: tuple[str, ...] = ()) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(folder))
    for s, r in enumerate(rows, 1):
        for k, v in r.items():
            writer.add_scalar(k, v, s)
        for k in step_keys:
            writer.add_scalar(k, s, s)
    writer.close()
    return folder


def write_trl_state(path: Path, rows: list[dict[str, float]]) -> Path:
    from transformers import TrainerState

    state = TrainerState(global_step=len(rows), max_steps=len(rows), logging_steps=1)
    state.log_history = [{**r, "epoch": s / len(rows), "step": s} for s, r in enumerate(rows, 1)]
    state.save_to_json(str(path))
    return path


_WANDB = """
import json, sys, wandb
rows = json.load(open(sys.argv[1]))
run = wandb.init(project="rlobs-peer-eval", config={"framework": "prime-rl"})
for s, r in enumerate(rows, 1):
    run.log({**r, "step": s}, step=s)
run.finish()
"""


def write_wandb(folder: Path, rows: list[dict[str, float]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "rows.json"
    data.write_text(json.dumps(rows))
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(folder), "WANDB_SILENT": "true",
           "WANDB_DISABLE_GIT": "true", "WANDB_CONSOLE": "off"}
    subprocess.run([sys.executable, "-c", _WANDB, str(data)], env=env, check=True, timeout=300, cwd=folder)
    (run,) = (folder / "wandb").glob("offline-run-*")
    return run


def write_run(fw: str, rows: list[dict[str, float]], folder: Path, fmt: str) -> tuple[str, Path]:
    """Write one run; returns (rlobs import source, path)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = named(rows, FRAMEWORKS[fw][1])
    if fw == "verl" and fmt == "jsonl":
        return "verl", write_verl_jsonl(folder / "metrics.jsonl", lines)
    if fw == "trl":
        return "trl", write_trl_state(folder / "trainer_state.json", lines)
    if fw == "prime-rl":
        return "prime-rl", write_wandb(folder, lines)
    keys = ("train/step",) if fw == "slime" else ()
    return fw, write_tensorboard(folder / "tb", lines, step_keys=keys)


FORMATS = {"verl": ("jsonl", "tensorboard"), "trl": ("trainer_state",), "openrlhf": ("tensorboard",),
           "areal": ("tensorboard",), "slime": ("tensorboard",), "nemo-rl": ("tensorboard",), "prime-rl": ("wandb",)}


def runs(frameworks: tuple[str, ...] | None = None, healthy_seeds: int = 3) -> list[dict[str, Any]]:
    """Every run of the corpus: framework, format, problem (None = healthy), magnitude, onset, seed."""
    out = []
    for fw in frameworks or tuple(FRAMEWORKS):
        for fmt in FORMATS[fw]:
            for seed in range(healthy_seeds):
                out.append({"framework": fw, "format": fmt, "problem": None, "magnitude": None, "onset": None,
                            "seed": 1000 + seed})
            for i, p in enumerate(FRAMEWORKS[fw][0]):
                for mag in PROBLEMS[p].magnitudes:
                    for j, onset in enumerate(ONSETS):
                        out.append({"framework": fw, "format": fmt, "problem": p, "magnitude": mag, "onset": onset,
                                    "seed": 10 * i + j + int(mag * 7) % 5})
    return out


def series_for(run: dict[str, Any]) -> list[dict[str, float]]:
    rows = healthy(run["seed"])
    if run["problem"]:
        plant(rows, run["problem"], run["magnitude"], run["onset"])
    return rows
