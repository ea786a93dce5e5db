"""NeMo-RL GRPO metric names (``Logger.log_metrics(metrics, step, prefix="train")`` and ``timing/train/*``).

Read at NVIDIA-NeMo/RL 7ea279abfbeb698b092856d0dab61e7cf39bc909 (2026-08-22): nemo_rl/algorithms/grpo.py
(loss, grad_norm, reward, mean_prompt_length, total_num_tokens, advantages/*, the timing tree) and
nemo_rl/algorithms/loss/loss_functions.py (token_mult_prob_error, gen_kl_error, policy_kl_error,
js_divergence_error, approx_entropy, sampling_importance_ratio). ``token_mult_prob_error`` is about
exp(mean |logp_train - logp_gen|) (1.0 is perfect parity); ``gen_kl_error`` is a KL estimate between the
generator and the trainer, mapped to ``parity.kl_k1``.
"""

from __future__ import annotations

from rlobs.importers.mapping import MetricTable, Target

T = Target

TABLE = MetricTable(
    framework="nemo-rl",
    exact={
        "train/loss": T("train_step", "loss"),
        "train/grad_norm": T("train_step", "grad_norm"),
        "train/lr": T("train_step", "lr"),
        "train/reward": T("train_step", "reward_mean"),
        "train/approx_entropy": T("train_step", "entropy"),
        "train/gen_kl_error": T("parity", "kl_k1", note="KL between generator and trainer log-probs"),
        "train/token_mult_prob_error": T("scalar", "value", op="alias",
                                         fixed={"name": "rlobs/parity_mult_prob_error"}),
        "train/sampling_importance_ratio": T("staleness", "is_ratio_mean"),
        "train/mean_prompt_length": T("rollout_summary", "prompt_tokens_mean"),
        "train/mean_gen_tokens_per_sample": T("rollout_summary", "completion_tokens_mean"),
        "train/advantages/max": T("advantage", "max_abs_advantage", op="absmax"),
        "train/advantages/min": T("advantage", "max_abs_advantage", op="absmax"),
        "timing/train/total_step_time": T("train_step", "step_seconds"),
        "timing/train/generation": T("phase", "seconds", fixed={"phase": "generation"}),
        "timing/train/policy_training": T("phase", "seconds", fixed={"phase": "training"}),
        "timing/train/weight_sync": T("weight_sync", "duration_s", fixed={"boundary": "end_to_end"}),
        "timing/train/prepare_for_generation/transfer_and_update_weights":
            T("weight_sync", "duration_s", fixed={"boundary": "transfer"}),
    },
)
