"""slime metric names (wandb / TensorBoard through ``slime.utils.logging_utils.log``).

Read at THUDM/slime 624b824a898ab0ec1fcb4d373004c7f3852bf515 (2026-08-21): the trainer logs
``train/<loss key>`` (slime/backends/megatron_utils/loss.py: loss, pg_loss, entropy_loss, pg_clipfrac,
ppo_kl, kl_loss, train_rollout_logprob_abs_diff) and ``train/grad_norm`` (megatron_utils/model.py) with
``train/step``; rollouts log ``rollout/<name>`` (slime/observability/rollout_metrics.py: truncated_ratio,
raw_reward, response_len/*, ...) with ``rollout/step``; ``perf/*`` (observability/train_metric_utils.py)
holds step, train and wait times. ``train_rollout_logprob_abs_diff`` is mean |logp_train - logp_rollout|,
the same quantity as ``parity.mean_abs_dlogp``.
"""

from __future__ import annotations

from rlobs.importers.mapping import MetricTable, Target

T = Target

TABLE = MetricTable(
    framework="slime",
    exact={
        "train/grad_norm": T("train_step", "grad_norm"),
        "train/loss": T("train_step", "loss"),
        "train/entropy_loss": T("train_step", "entropy", note="mean token entropy (the entropy bonus term)"),
        "train/kl_loss": T("train_step", "kl"),
        "train/train_rollout_logprob_abs_diff": T("parity", "mean_abs_dlogp"),
        "train/pg_clipfrac": T("scalar", "value", op="alias", fixed={"name": "rlobs/policy_clip_fraction"}),
        "train/ppo_kl": T("scalar", "value", op="alias", fixed={"name": "rlobs/policy_update_kl"}),
        "rollout/raw_reward": T("train_step", "reward_mean"),
        "rollout/truncated_ratio": T("rollout_summary", "truncated_ratio"),
        "rollout/response_len/mean": T("rollout_summary", "completion_tokens_mean"),
        "rollout/response_len/max": T("rollout_summary", "completion_tokens_max"),
        "rollout/response_len/min": T("rollout_summary", "completion_tokens_min"),
        "rollout/rollout_time": T("phase", "seconds", fixed={"phase": "generation"}),
        "perf/step_time": T("train_step", "step_seconds"),
        "perf/train_wait_time": T("train_step", "data_wait_s", note="time the trainer waited for the rollout"),
        "perf/actor_train_time": T("phase", "seconds", fixed={"phase": "training"}),
        "perf/wait_time_ratio": T("scalar", "value", op="alias", fixed={"name": "rlobs/trainer_idle_ratio"}),
    },
)
