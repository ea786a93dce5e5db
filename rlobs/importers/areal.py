"""AReaL metric names (``stats_tracker`` export: ``<scope>/<key>/avg|min|max`` for distributions).

Read at inclusionAI/AReaL 4aef98d8d818af55b43621aaadba047ae10f4e77 (2026-05-21): areal/trainer/ppo/actor.py
(scope ``ppo_actor``: task_reward, seq_len, no_eos_ratios, and under ``update``: entropy, importance_weight,
approx_kl, clip_ratio, behave_imp_weight, behave_approx_kl, grad_norm, lr from areal/engine/fsdp_engine.py),
areal/utils/stats_tracker.py (the /avg /min /max suffixes). ``behave_approx_kl`` is the KL between the
behaviour (inference) policy and the proximal one: parity. ``no_eos_ratios`` is the share of sequences that
hit the length limit.
"""

from __future__ import annotations

from rlobs.importers.mapping import MetricTable, Target

T = Target

TABLE = MetricTable(
    framework="areal",
    exact={
        "ppo_actor/update/grad_norm": T("train_step", "grad_norm"),
        "ppo_actor/update/lr": T("train_step", "lr"),
        "ppo_actor/update/actor_loss/avg": T("train_step", "loss"),
        "ppo_actor/update/entropy/avg": T("train_step", "entropy"),
        "ppo_actor/task_reward/avg": T("train_step", "reward_mean"),
        "ppo_actor/seq_len/avg": T("rollout_summary", "completion_tokens_mean"),
        "ppo_actor/seq_len/max": T("rollout_summary", "completion_tokens_max"),
        "ppo_actor/seq_len/min": T("rollout_summary", "completion_tokens_min"),
        "ppo_actor/no_eos_ratios/avg": T("rollout_summary", "truncated_ratio"),
        "ppo_actor/update/behave_approx_kl/avg": T("parity", "kl_k1", note="behaviour vs proximal policy"),
        "ppo_actor/update/behave_imp_weight/avg": T("staleness", "is_ratio_mean"),
        "ppo_actor/update/behave_imp_weight/max": T("staleness", "is_ratio_max"),
        "ppo_actor/update/clip_ratio/avg": T("scalar", "value", op="alias",
                                             fixed={"name": "rlobs/policy_clip_fraction"}),
        "ppo_actor/update/approx_kl/avg": T("scalar", "value", op="alias", fixed={"name": "rlobs/policy_update_kl"}),
    },
)
