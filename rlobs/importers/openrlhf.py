"""OpenRLHF metric names (``openrlhf/trainer/ray/ppo_actor.py`` status dict, ``ppo_utils/loggers.py``).

OpenRLHF logs the actor/critic status dicts per global step: to wandb as ``train/<name>`` with
``train/global_step`` as the step metric, to TensorBoard as ``train/<name>`` at the global step.
OpenRLHF does not log a gradient norm in the versions read; ``grad_norm`` / ``actor_grad_norm`` are mapped
when a fork logs them. ``vllm_kl`` (vLLM vs trainer log-probs) is kept as a scalar: its estimator is
now mapped: ``openrlhf/models/loss.py`` computes it as masked_mean(rollout_log_probs - old_log_probs), the
k1 estimator of KL(vLLM || trainer), logged only with vLLM IS correction.

Read at OpenRLHF 3c3be6234e0cb353e76bb8019947db9dfe99fca7 (2026-08-13): openrlhf/trainer/ray/ppo_actor.py,
openrlhf/models/loss.py, openrlhf/trainer/ppo_trainer.py.
"""

from __future__ import annotations

from rlobs.importers.mapping import MetricTable, Target

T = Target

TABLE = MetricTable(
    framework="openrlhf",
    exact={
        "policy_loss": T("train_step", "loss"),
        "actor_lr": T("train_step", "lr"),
        "kl": T("train_step", "kl"),
        "reward": T("train_step", "reward_mean"),
        "entropy_loss": T("train_step", "entropy", note="masked mean token entropy"),
        "grad_norm": T("train_step", "grad_norm"),
        "actor_grad_norm": T("train_step", "grad_norm"),
        "response_length": T("rollout_summary", "completion_tokens_mean"),
        "vllm_kl": T("parity", "kl_k1", note="mean(rollout_logp - old_logp): k1 KL(vLLM || trainer)"),
        "ppo_clip_ratio": T("scalar", "value", op="alias", fixed={"name": "rlobs/policy_clip_fraction"}),
        "ppo_kl": T("scalar", "value", op="alias", fixed={"name": "rlobs/policy_update_kl"}),
    },
    prefixes=("train/",),
)
