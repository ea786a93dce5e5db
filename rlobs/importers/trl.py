"""TRL ``GRPOTrainer`` metric names (``trl/trainer/grpo_trainer.py``, transformers' ``Trainer.log``).

TRL keeps ``trainer.state.log_history`` (saved in every checkpoint's ``trainer_state.json``), prints the
same dicts to the console, and sends them to wandb / TensorBoard with a ``train/`` prefix. With
``logging_steps > 1`` each row is the mean over the window (grad_norm: the last step's). The zero-std
share is TRL's ``frac_reward_zero_std`` (groups whose reward std is 0, std + 1e-4 is the denominator);
``sampling/sampling_logp_difference/*`` is |logp_old - logp_vllm| per token, the same quantity as
``parity.mean_abs_dlogp``, and only logged with vLLM importance-sampling correction.
"""

from __future__ import annotations

from rlobs.importers.mapping import MetricTable, Target

# Read at trl f2cd57710ae345ea6428ae95363267fcf38a3dc8 (2026-07-24): trl/trainer/grpo_trainer.py,
# trl/experimental/async_grpo/async_grpo_trainer.py.

T = Target

TABLE = MetricTable(
    framework="trl",
    exact={
        "loss": T("train_step", "loss"),
        "grad_norm": T("train_step", "grad_norm"),
        "learning_rate": T("train_step", "lr"),
        "reward": T("train_step", "reward_mean"),
        "reward_std": T("train_step", "reward_std"),
        "kl": T("train_step", "kl"),
        "entropy": T("train_step", "entropy"),
        "step_time": T("train_step", "step_seconds"),
        "frac_reward_zero_std": T("advantage", "zero_std_ratio"),
        "completions/mean_length": T("rollout_summary", "completion_tokens_mean"),
        "completions/min_length": T("rollout_summary", "completion_tokens_min"),
        "completions/max_length": T("rollout_summary", "completion_tokens_max"),
        "completions/clipped_ratio": T("rollout_summary", "truncated_ratio"),
        "sampling/sampling_logp_difference/mean": T("parity", "mean_abs_dlogp"),
        "sampling/sampling_logp_difference/max": T("parity", "max_abs_dlogp"),
        "sampling/importance_sampling_ratio/mean": T("staleness", "is_ratio_mean"),
        "sampling/importance_sampling_ratio/max": T("staleness", "is_ratio_max"),
        "clip_ratio/region_mean": T("scalar", "value", op="alias", fixed={"name": "rlobs/policy_clip_fraction"}),
        # trl.experimental.async_grpo (AsyncGRPOTrainer)
        "queue_wait_time_s": T("train_step", "data_wait_s", note="async GRPO: time the trainer waited on the queue"),
        "weight_sync_time_s": T("weight_sync", "duration_s", fixed={"boundary": "end_to_end"}),
    },
    prefixes=("train/",),
)
