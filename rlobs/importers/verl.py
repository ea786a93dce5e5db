"""verl metric names (``verl.trainer.ppo.metric_utils``, the actors, ``verl.utils.tracking``).

verl logs one flat dict per step through ``Tracking``: the ``file`` backend writes JSONL
``{"step": N, "elapsed_seconds": s, "data": {...}}`` (``VERL_FILE_LOGGER_PATH``), the ``console`` backend
prints ``step:N - name:value - ...`` (values rounded to 3 decimals), and wandb / tensorboard get the
same names. Note ``training/rollout_probs_diff_*`` is a *probability* difference |p_rollout - p_actor|,
not a log-prob difference: it maps to ``parity.mean_abs_dprob``, and the parity-drift rule (log-prob
thresholds) does not judge it.
"""

from __future__ import annotations

from rlobs.importers.mapping import MetricTable, Target

T = Target

TABLE = MetricTable(
    framework="verl",
    exact={
        "actor/grad_norm": T("train_step", "grad_norm"),
        "actor/pg_loss": T("train_step", "loss"),
        "actor/lr": T("train_step", "lr"),
        "actor/entropy": T("train_step", "entropy"),
        "actor/kl_loss": T("train_step", "kl", note="KL to the reference policy used as a loss"),
        "critic/score/mean": T("train_step", "reward_mean", note="sequence score (reward before KL penalty)"),
        "timing_s/step": T("train_step", "step_seconds"),
        "critic/advantages/max": T("advantage", "max_abs_advantage", op="absmax"),
        "critic/advantages/min": T("advantage", "max_abs_advantage", op="absmax"),
        "response_length/mean": T("rollout_summary", "completion_tokens_mean"),
        "response_length/min": T("rollout_summary", "completion_tokens_min"),
        "response_length/max": T("rollout_summary", "completion_tokens_max"),
        "response_length/clip_ratio": T("rollout_summary", "truncated_ratio"),
        "response/aborted_ratio": T("rollout_summary", "aborted_ratio"),
        "prompt_length/mean": T("rollout_summary", "prompt_tokens_mean"),
        "timing_s/gen": T("phase", "seconds", fixed={"phase": "generation"}),
        "timing_s/reward": T("phase", "seconds", fixed={"phase": "grading"}),
        "timing_s/update_actor": T("phase", "seconds", fixed={"phase": "training"}),
        "timing_s/update_weights": T("weight_sync", "duration_s", fixed={"boundary": "end_to_end"},
                                     note="whole sync (gather, transfer, load); version = step"),
        "training/rollout_probs_diff_mean": T("parity", "mean_abs_dprob"),
        "training/rollout_probs_diff_max": T("parity", "max_abs_dprob"),
        "perf/total_num_tokens": T("throughput", "tokens", op="int"),
        "perf/time_per_step": T("throughput", "window_s"),
    },
)
