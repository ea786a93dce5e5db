"""prime-rl metric names (orchestrator and trainer monitors; wandb).

Read at PrimeIntellect-ai/prime-rl 559b44772e471d1538537b8805cc77f3824a5e64 (2026-08-21):
src/prime_rl/orchestrator/orchestrator.py (time/*, off_policy/* staleness of the shipped cohort in policy
versions, progress/*, reward/mean via orchestrator/metrics.py, is_truncated/mean), src/prime_rl/trainer/rl/train.py
(optim/grad_norm, optim/lr, entropy/all/mean, mismatch_kl/all/mean: KL between inference and trainer
log-probs, time/wait_for_batch).
"""

from __future__ import annotations

from rlobs.importers.mapping import MetricTable, Target

T = Target

TABLE = MetricTable(
    framework="prime-rl",
    exact={
        "optim/grad_norm": T("train_step", "grad_norm"),
        "optim/lr": T("train_step", "lr"),
        "loss/mean": T("train_step", "loss"),
        "entropy/all/mean": T("train_step", "entropy"),
        "mismatch_kl/all/mean": T("parity", "kl_k1", note="inference vs trainer log-prob KL"),
        "reward/mean": T("train_step", "reward_mean"),
        "time/step": T("train_step", "step_seconds"),
        "time/wait_for_batch": T("train_step", "data_wait_s"),
        "time/broadcast_weights": T("weight_sync", "duration_s", fixed={"boundary": "end_to_end"}),
        "time/forward_backward": T("phase", "seconds", fixed={"phase": "training"}),
        "off_policy/max": T("staleness", "max_staleness", op="int"),
        "off_policy/mean": T("staleness", "mean_staleness"),
        "is_truncated/mean": T("rollout_summary", "truncated_ratio"),
        "num_output_tokens/mean": T("rollout_summary", "completion_tokens_mean"),
    },
)
