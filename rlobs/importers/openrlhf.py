"""OpenRLHF metric names (``openrlhf/trainer/ray/ppo_actor.py`` status dict, ``ppo_utils/loggers.py``).

OpenRLHF logs the actor/critic status dicts per global step: to wandb as ``train/<name>`` with
``train/global_step`` as the step metric, to TensorBoard as ``train/<name>`` at the global step.
OpenRLHF does not log a gradient norm in the versions read; ``grad_norm`` / ``actor_grad_norm`` are mapped
when a fork logs them. ``vllm_kl`` (vLLM vs trainer log-probs) is kept as a scalar: its estimator is
not documented, so it is not put into ``parity``.
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
    },
    prefixes=("train/",),
)
