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

# Read at verl b178a3cd56f58b2d502255daba591e92833930a7 (2026-01-29): verl/trainer/ppo/metric_utils.py,
# verl/trainer/ppo/ray_trainer.py, verl/utils/debug/metrics.py, verl/trainer/ppo/rollout_corr_helper.py,
# verl/experimental/fully_async_policy/{detach_utils,fully_async_trainer,fully_async_rollouter}.py;
# training/off_policy/* from the newer trainers' _compute_off_policy metrics (docs/importers.md).

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
        # off-policy / async families (fully_async, one_step_off, separate async trainers)
        "training/off_policy/trajectory_staleness/max": T("staleness", "max_staleness", op="int",
                                                          note="versions the freshest weights of a trajectory lag"),
        "training/off_policy/trajectory_staleness/mean": T("staleness", "mean_staleness"),
        "fully_async/count/stale_samples_processed": T("scalar", "value", op="alias",
                                                       fixed={"name": "rlobs/stale_samples_total"},
                                                       note="cumulative count of consumed samples >= 1 version old"),
        "fully_async/count/total_generated_samples": T("scalar", "value", op="alias",
                                                       fixed={"name": "rlobs/generated_samples_total"}),
        "trainer/idle_ratio": T("scalar", "value", op="alias", fixed={"name": "rlobs/trainer_idle_ratio"},
                                note="timing_s/gen / timing_s/step: share of the step the trainer waits for samples"),
        "fully_async/trainer/idle_ratio": T("scalar", "value", op="alias", fixed={"name": "rlobs/trainer_idle_ratio"}),
        "rollouter/idle_ratio": T("scalar", "value", op="alias", fixed={"name": "rlobs/rollouter_idle_ratio"}),
        "fully_async/rollouter/idle_ratio": T("scalar", "value", op="alias",
                                              fixed={"name": "rlobs/rollouter_idle_ratio"}),
        # rollout correction (rollout_corr_helper.compute_offpolicy_metrics / compute_rollout_correction_*)
        "rollout_corr/kl": T("parity", "kl_k1", note="KL(pi_rollout || pi_train), k1 estimator"),
        "rollout_corr/k3_kl": T("parity", "kl_k3"),
        "rollout_corr/rollout_is_mean": T("staleness", "is_ratio_mean"),
        "rollout_corr/rollout_is_max": T("staleness", "is_ratio_max"),
        "actor/pg_clipfrac": T("scalar", "value", op="alias", fixed={"name": "rlobs/policy_clip_fraction"}),
        "actor/ppo_kl": T("scalar", "value", op="alias", fixed={"name": "rlobs/policy_update_kl"},
                          note="KL(old || new) of the PPO update"),
        "training/rollout_probs_diff_std": T("scalar", "value", op="alias", fixed={"name": "rlobs/parity_dprob_std"}),
    },
)
