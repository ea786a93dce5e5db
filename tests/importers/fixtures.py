"""Small generators of realistic trainer logs, written with the libraries' own writers where one exists:
TensorBoard event files with ``torch.utils.tensorboard.SummaryWriter``, TRL's ``trainer_state.json`` with
``transformers.TrainerState.save_to_json``, TRL's console with ``transformers.PrinterCallback``, the wandb
history CSV with pandas (``run.history()`` is a DataFrame). verl's file / console loggers and wandb's
``wandb-history.jsonl`` have no standalone writer: they are written in the exact shapes of
``verl.utils.tracking.FileLogger``, ``verl.utils.logger.aggregate_logger.concat_dict_to_str`` and wandb's
history rows (``_step``, ``_runtime``, ``_timestamp``).

``python -m tests.importers.fixtures OUT_DIR`` writes one of each.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import numbers
import sys
from pathlib import Path
from typing import Any

SPIKE_STEP = 9


def verl_metrics(step: int, *, spike_at: int | None = SPIKE_STEP, nan_at: int | None = None) -> dict[str, Any]:
    """One verl step (names from verl.trainer.ppo.metric_utils and the actor), deterministic values."""
    g = 0.5 + 0.01 * (step % 3)
    if spike_at is not None and step == spike_at:
        g = 2e4
    if nan_at is not None and step == nan_at:
        g = float("nan")
    return {
        "actor/grad_norm": g, "actor/pg_loss": -0.01 * step, "actor/lr": 1e-6, "actor/entropy": 1.2,
        "actor/pg_clipfrac": 0.002, "actor/ppo_kl": 1e-4, "actor/kl_loss": 0.001,
        "critic/score/mean": 0.1 * step, "critic/score/max": 1.0, "critic/score/min": 0.0,
        "critic/rewards/mean": 0.1 * step, "critic/advantages/mean": 0.0, "critic/advantages/max": 1.5 + 0.1 * step,
        "critic/advantages/min": -2.0 - 0.1 * step, "critic/returns/mean": 0.0,
        "response_length/mean": 200.0 + step, "response_length/max": 512.0, "response_length/min": 12.0,
        "response_length/clip_ratio": 0.05, "prompt_length/mean": 90.0, "response/aborted_ratio": 0.0,
        "timing_s/gen": 10.0 + step, "timing_s/reward": 1.5, "timing_s/old_log_prob": 2.0,
        "timing_s/update_actor": 6.0, "timing_s/update_weights": 0.8, "timing_s/step": 21.0,
        "timing_per_token_ms/gen": 0.05, "perf/total_num_tokens": 37000, "perf/time_per_step": 21.0,
        "perf/throughput": 881.0, "training/rollout_probs_diff_mean": 0.003, "training/rollout_probs_diff_max": 0.4,
        "training/rollout_probs_diff_std": 0.01, "training/global_step": step, "training/epoch": 0,
        "val-core/openai/gsm8k/reward/mean@1": 0.42,
    }


def write_verl_file_logger(path: Path, steps: int = 12, **kw: Any) -> Path:
    """``VERL_FILE_LOGGER_PATH`` JSONL: {"step", "elapsed_seconds", "data"} per line."""
    with path.open("w") as fh:
        for s in range(1, steps + 1):
            fh.write(json.dumps({"step": s, "elapsed_seconds": 21.0 * s, "data": verl_metrics(s, **kw)}) + "\n")
    return path


def concat_dict_to_str(data: dict[str, Any], step: int) -> str:
    """verl's console line (verl.utils.logger.aggregate_logger)."""
    out = [f"step:{step}"]
    for k, v in data.items():
        if isinstance(v, numbers.Number):
            out.append(f"{k}:{v:.3f}")
    return " - ".join(out)


def write_verl_console(path: Path, steps: int = 12) -> Path:
    lines = ["(TaskRunner pid=4242) Training Progress:   0%|          | 0/12", "INFO: vLLM engine started"]
    lines += [f"(TaskRunner pid=4242) {concat_dict_to_str(verl_metrics(s), s)}" for s in range(1, steps + 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def trl_logs(step: int) -> dict[str, Any]:
    """One GRPOTrainer log row (names from trl/trainer/grpo_trainer.py + Trainer.log)."""
    return {"loss": 0.01 * step, "grad_norm": 0.3 + 0.01 * step, "learning_rate": 1e-6, "num_tokens": 1000.0 * step,
            "completions/mean_length": 40.0 + step, "completions/min_length": 5.0, "completions/max_length": 64.0,
            "completions/clipped_ratio": 0.1, "completions/mean_terminated_length": 38.0,
            "rewards/accuracy_reward/mean": 0.5, "rewards/accuracy_reward/std": 0.5, "reward": 0.5,
            "reward_std": 0.45, "frac_reward_zero_std": 0.25 if step < 4 else 0.875, "kl": 0.002, "entropy": 0.9,
            "clip_ratio/region_mean": 0.0, "step_time": 3.2, "epoch": step / 100}


def write_trl_state(path: Path, steps: int = 6) -> Path:
    from transformers import TrainerState

    state = TrainerState(global_step=steps, max_steps=steps, logging_steps=1)
    state.log_history = [{**trl_logs(s), "step": s} for s in range(1, steps + 1)]
    state.log_history.append({"eval_loss": 0.3, "eval_reward": 0.6, "epoch": steps / 100, "step": steps})
    state.log_history.append({"train_runtime": 20.0, "train_samples_per_second": 4.8, "total_flos": 0.0,
                              "train_loss": 0.03, "epoch": steps / 100, "step": steps})
    state.save_to_json(str(path))
    return path


def write_trl_console(path: Path, steps: int = 6) -> Path:
    """What transformers' PrinterCallback prints (values formatted with .4g), between progress lines."""
    from transformers import (
        PrinterCallback,
        TrainerControl,
        TrainerState,
        TrainingArguments,
    )

    cb, state = PrinterCallback(), TrainerState()
    args = TrainingArguments(output_dir=str(path.parent / "_unused"), report_to=[], use_cpu=True)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print("Loading weights: 100%|##########| 12/12")
        for s in range(1, steps + 1):
            logs = trl_logs(s)
            if s == 3:
                logs["grad_norm"] = float("nan")
            cb.on_log(args, state, TrainerControl(), logs=logs)
        cb.on_log(args, state, TrainerControl(), logs={"train_runtime": 20.0, "train_loss": 0.03, "epoch": 0.06})
    path.write_text(buf.getvalue())
    return path


def openrlhf_logs(step: int) -> dict[str, Any]:
    """OpenRLHF PPO status dict (openrlhf/trainer/ray/ppo_actor.py + experience info)."""
    return {"policy_loss": -0.02, "actor_lr": 5e-7, "kl": 0.001 * step, "reward": 0.2 + 0.01 * step,
            "return": 0.1, "response_length": 300.0 + step, "total_length": 420.0, "ppo_clip_ratio": 0.01,
            "ppo_kl": 1e-4, "critic_loss": 0.05, "values": 0.3, "critic_lr": 9e-6}


def write_tensorboard(folder: Path, framework: str, steps: int = 8, *, prefix: str = "") -> Path:
    """Scalars as verl's _TensorboardAdapter / OpenRLHF's TensorboardLogger write them."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(folder))
    for s in range(1, steps + 1):
        data = verl_metrics(s) if framework == "verl" else openrlhf_logs(s) if framework == "openrlhf" else trl_logs(s)
        for k, v in data.items():
            writer.add_scalar(f"{prefix}{k}", v, s)
    writer.add_text("val/generations", "**Generation Results - Step 1**", 1)
    writer.close()
    return folder


def write_wandb_run(folder: Path, framework: str = "openrlhf", steps: int = 8) -> Path:
    """A wandb run folder: files/wandb-history.jsonl (+ output.log, config)."""
    files = folder / "files"
    files.mkdir(parents=True, exist_ok=True)
    with (files / "wandb-history.jsonl").open("w") as fh:
        for s in range(1, steps + 1):
            if framework == "openrlhf":  # OpenRLHF: train/<name> with train/global_step as the step metric
                row = {f"train/{k}": v for k, v in openrlhf_logs(s).items()} | {"train/global_step": s}
            else:
                row = dict(verl_metrics(s))
            row |= {"_step": s - 1, "_runtime": 12.5 * s, "_timestamp": 1.7e9 + 12.5 * s}
            if s == 2:
                row["train/generated_samples"] = {"_type": "table-file", "path": "media/table/x.json", "ncols": 3}
            fh.write(json.dumps(row) + "\n")
    (files / "output.log").write_text("wandb: Tracking run\n")
    return folder


def write_wandb_csv(path: Path, steps: int = 8) -> Path:
    """``wandb.Api().run(...).history().to_csv()``: pandas, NaN cells empty, verl names."""
    import pandas as pd

    rows = [{"_step": s, **{k: v for k, v in verl_metrics(s).items() if not k.startswith("timing_per")}}
            for s in range(1, steps + 1)]
    rows[3]["actor/grad_norm"] = math.nan  # a gap: an empty cell
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


if __name__ == "__main__":  # pragma: no cover - manual use
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "importer-fixtures")
    out.mkdir(parents=True, exist_ok=True)
    write_verl_file_logger(out / "verl_metrics.jsonl")
    write_verl_console(out / "verl_console.log")
    write_trl_state(out / "trainer_state.json")
    write_trl_console(out / "trl_console.log")
    write_tensorboard(out / "tb_openrlhf", "openrlhf", prefix="train/")
    write_wandb_run(out / "wandb_run")
    write_wandb_csv(out / "wandb_history.csv")
    print(f"wrote fixtures into {out}")


_WANDB_WRITER = """
import json, sys
import wandb
steps, framework = int(sys.argv[1]), sys.argv[2]
sys.path.insert(0, sys.argv[3])
from tests.importers import fixtures as fx
run = wandb.init(project="rlobs-import-test", config={"algorithm": "grpo"})
for s in range(1, steps + 1):
    data = fx.verl_metrics(s) if framework == "verl" else {f"train/{k}": v for k, v in fx.trl_logs(s).items()}
    run.log(data, step=s)
run.finish()
"""


def write_wandb_sdk_run(folder: Path, framework: str = "verl", steps: int = 40) -> Path:
    """A run written by the real wandb SDK in offline mode (a child process: wandb keeps global state).
    Returns the run folder (wandb/offline-run-<date>_<time>-<id>/)."""
    import os
    import subprocess
    import sys

    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(folder), "WANDB_SILENT": "true",
           "WANDB_DISABLE_GIT": "true", "WANDB_CONSOLE": "off"}
    repo = str(Path(__file__).resolve().parents[2])
    subprocess.run([sys.executable, "-c", _WANDB_WRITER, str(steps), framework, repo], env=env, check=True,
                   timeout=300, cwd=folder)
    (run,) = (folder / "wandb").glob("offline-run-*")
    return run
