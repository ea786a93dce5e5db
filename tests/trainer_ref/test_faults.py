"""Injected faults end to end: trainer_ref really misbehaves and the doctor names the root cause.

Three representative faults (a NaN gradient, a skipped prefix-cache reset, a slow grader) run through
the shared Ray actors (pointed at a fresh record with the fault in their config); the doctor's top-1
finding must be the fault's rule, found within the allowed delay, and the record declares the fault."""

from __future__ import annotations

import pytest

from tests.trainer_ref.conftest import small_config

pytestmark = pytest.mark.slow

ONSET, STEPS = 4, 7


def _point(actors: dict, cfg, hashes: dict) -> None:
    import ray

    handles = [actors["generator"], actors["trainer"], *actors["graders"]]
    ray.get([h.set_run.remote(cfg.run_dir, cfg.to_dict(), hashes) for h in handles])


@pytest.mark.parametrize("fault,rule,allowed", [
    ("nan_grad", "grad-norm-nonfinite", 1),
    ("cache_not_reset", "weight-sync-cache-not-reset", 1),
    ("slow_grader", "grader-slow", 3),
])
def test_injected_fault_is_the_doctors_top_finding(stack, tmp_path, fault, rule, allowed):
    import rlobs
    from rlobs.doctor import diagnose
    from trainer_ref.model_build import tokenizer_hash
    from trainer_ref.run import train

    actors, model_dir, session_record = stack
    hashes = {"tokenizer": tokenizer_hash(model_dir)}
    cfg = small_config(tmp_path / fault, steps=STEPS, fault=fault, fault_onset=ONSET, grader_timeout_s=5.0)
    _point(actors, cfg, hashes)
    try:
        summary = train(cfg, actors=actors, model_dir=model_dir)
    finally:  # the shared actors go back to the session record, without a fault
        _point(actors, small_config(session_record), hashes)
    assert summary["steps"] == STEPS
    rec = rlobs.open_run(cfg.run_dir)
    assert rec.sql("SELECT fault, onset_step FROM incident").fetchall() == [(fault, ONSET)]
    # the fault really happened
    if fault == "nan_grad":
        assert rec.sql("SELECT step FROM train_step WHERE nonfinite ORDER BY step").fetchall() == [(ONSET,)]
    elif fault == "cache_not_reset":
        skipped = rec.sql("SELECT min(version) FROM weight_sync WHERE boundary = 'cache_reset' "
                          "AND NOT reset_requested").fetchall()[0][0]
        assert skipped == ONSET + 1  # the version trained at the onset step
    else:
        lat = rec.sql("SELECT max(latency_s) FROM grader_call").fetchall()[0][0]
        assert lat >= 0.4
    report = diagnose(rec)
    assert report.findings, "the doctor found nothing"
    top = report.findings[0]
    assert top.rule == rule, [f.rule for f in report.findings]
    assert top.first_step is not None and 0 <= top.first_step - ONSET <= allowed
