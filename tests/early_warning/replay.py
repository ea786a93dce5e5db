"""Shared by the early-warning tests: one extracted step of a real trainer_ref record, emitted again."""

from __future__ import annotations

from typing import Any


def emit_step(rec: Any, row: dict[str, Any], correction_cap: float | None = None) -> None:
    """Emit ``row`` (a step of ``data/collapse_runs.json``) as the trainer and its probes recorded it
    (``correction_cap``: the run's importance-correction cap, recorded on its staleness events)."""
    rec.set_step(int(row["step"]))
    rec.emit("train_step", loss=0.0, grad_norm=row.get("grad_norm"), reward_mean=row.get("reward"),
             entropy=row.get("entropy"), kl=row.get("kl"), policy_kl=row.get("policy_kl"), lr=row.get("lr"))
    if row.get("heldout") is not None:  # a held-out evaluation after this step (trainer_ref's driver emits it)
        rec.emit("scalar", name="eval_reward_mean", value=row["heldout"], source="trainer_ref")
    if row.get("audit_gap") is not None:  # the grader audit of the step's samples (trainer_ref's driver emits it)
        rec.emit("scalar", name="grader_audit_gap", value=row["audit_gap"], source="trainer_ref")
    if row.get("zero_std") is not None:
        rec.emit("advantage", groups=8, zero_std_groups=round(8 * row["zero_std"]), zero_std_ratio=row["zero_std"])
    if row.get("is_clipped") is not None or row.get("ess") is not None:
        rec.emit("staleness", samples=64, is_clipped_ratio=row.get("is_clipped"), ess_ratio=row.get("ess"),
                 mean_staleness=row.get("staleness"), is_correction_cap=correction_cap)
