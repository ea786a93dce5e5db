"""``ledger-samples-skipped`` at the end of a bounded-staleness run: samples still waiting in the buffer when a
clean run ends are not lost; samples left behind long before the end are. Records written through the real
recorder, one process per component, as trainer_ref writes them."""

from __future__ import annotations

from pathlib import Path

import pytest

import rlobs
from rlobs.doctor import Severity, diagnose

STEPS = 20


def _run(run: Path, *, max_staleness: int | None, left_at: list[int]) -> Path:
    """A separate_async run of ``STEPS`` steps: each step generates 8 samples and the trainer consumes the 8 of
    the step before, so each run ends with the last step's 8 samples in the buffer; ``left_at``: steps whose
    samples also stay in the buffer, never consumed nor dropped."""
    cfg = {"mode": "separate_async", **({} if max_staleness is None else {"max_staleness": max_staleness})}
    recs = {c: rlobs.init(run, component=c, prometheus=False, set_global=False, flush_interval=3600, config=cfg)
            for c in ("trainer", "generator")}
    pending: list[str] = []
    for step in range(STEPS):
        recs["trainer"].emit("train_step", step=step, loss=0.5, grad_norm=1.0)
        fresh = [f"s{step}-{i}" for i in range(8)]
        for sid in fresh:
            recs["generator"].emit("ledger", sample_id=sid, state="generated", tokens=10)
        for sid in pending:
            recs["trainer"].emit("ledger", step=step, sample_id=sid, state="consumed", staleness=1)
        pending = [] if step in left_at else fresh
    for r in recs.values():
        assert r.flush(10.0)
        r.close()
    return run


@pytest.mark.parametrize("max_staleness", [8, 2, None])
def test_the_buffer_a_run_ends_with_is_not_lost(tmp_path: Path, max_staleness: int | None):
    """Samples generated within the configured staleness bound (plus the rule's 3-step grace) of the last step may
    still be waiting when a clean run ends. At max staleness 8 the bench's staleness-no-is runs ended with 4-8 steps
    of them, which the rule read as lost (a critical) before 6 Dec 2026."""
    left = {8: [STEPS - 12], 2: [STEPS - 6], None: [STEPS - 4]}[max_staleness]  # the oldest bound + grace allow
    with rlobs.open_run(_run(tmp_path / "r", max_staleness=max_staleness, left_at=left)) as rec:
        assert diagnose(rec, rule_ids=["ledger-samples-skipped"]).findings == []


@pytest.mark.parametrize("max_staleness", [8, 2, None])
def test_samples_left_behind_before_the_bound_are_lost(tmp_path: Path, max_staleness: int | None):
    """One step further back than the bound and the grace allow, the same 8 samples are lost: a critical at that
    step, whatever the bound."""
    at = {8: STEPS - 13, 2: STEPS - 7, None: STEPS - 5}[max_staleness]
    with rlobs.open_run(_run(tmp_path / "r", max_staleness=max_staleness, left_at=[at])) as rec:
        (f,) = diagnose(rec, rule_ids=["ledger-samples-skipped"]).findings
    assert f.severity == Severity.CRITICAL and f.first_step == at
    assert f.evidence[0].observed == 8
