"""The staleness bound on the basis the run checks it on. trainer_ref's ``--staleness-basis completion`` keeps a
group resumed across weight syncs when its newest tokens are within the bound; its first tokens are older by design
(importance-corrected). The thirty-eighth early-warning run's tune split (6 Dec 2026) had ``staleness-over-bound``
raise a critical on both such healthy runs (dispatch staleness 6-7 against the bound 2, the newest tokens' at most 2),
and, once that was read right, ``staleness-growing`` warn on one (its dispatch staleness swinging with how many
groups were resumed). Records written through the real recorder, one process per component."""

from __future__ import annotations

from pathlib import Path

import pytest

import rlobs
from rlobs.doctor import Severity, diagnose

STEPS = 20
RULES = ["staleness-over-bound", "staleness-growing"]


def _run(run: Path, *, basis: str | None, bound: int | None, old, newest_lag, rollouts: bool = True) -> Path:
    """A separate_async run: at each step (trainer version = step) the trainer consumes two groups of 4: one
    dispatched and finished at the version before (staleness 1), and one resumed across weight syncs, dispatched
    ``old(step)`` versions back whose newest tokens are ``newest_lag(step)`` versions old."""
    cfg = {"mode": "separate_async", **({} if basis is None else {"staleness_basis": basis}),
           **({} if bound is None else {"max_staleness": bound})}
    recs = {c: rlobs.init(run, component=c, prometheus=False, set_global=False, flush_interval=3600, config=cfg)
            for c in ("trainer", "generator")}
    for step in range(2, STEPS + 2):
        groups = {f"g{step}a": (step - 1, step - 1), f"g{step}b": (step - old(step), step - newest_lag(step))}
        stal = []
        for gid, (dispatched, newest) in groups.items():
            for i in range(4):
                sid = f"{gid}-{i}"
                if rollouts:
                    recs["generator"].emit("rollout", sample_id=sid, group_id=gid, dispatch_version=dispatched,
                                           min_token_version=dispatched, max_token_version=newest - (i % 2),
                                           completion_tokens=10)
                recs["generator"].emit("ledger", sample_id=sid, state="generated", tokens=10)
                recs["trainer"].emit("ledger", step=step, sample_id=sid, state="consumed", staleness=step - dispatched)
                stal.append(step - dispatched)
        recs["trainer"].emit("staleness", step=step, samples=len(stal), max_staleness=max(stal),
                             mean_staleness=sum(stal) / len(stal))
        recs["trainer"].emit("train_step", step=step, loss=0.5, grad_norm=1.0)
    for r in recs.values():
        assert r.flush(10.0)
        r.close()
    return run


def _findings(run: Path):
    with rlobs.open_run(run) as rec:
        report = diagnose(rec, rule_ids=RULES)
    return {f.rule: f for f in report.findings}, report.insufficient


def test_resumed_groups_within_a_completion_bound_are_no_bypass(tmp_path: Path):
    """Dispatched 5 versions back, newest tokens 1 version old, bound 2 on the completion basis: nothing to report.
    The same samples under a dispatch-basis bound are a bypass (the critical stays for that reading)."""
    kw = {"bound": 2, "old": lambda s: 5, "newest_lag": lambda s: 1}
    found, _ = _findings(_run(tmp_path / "completion", basis="completion", **kw))
    assert found == {}
    found, _ = _findings(_run(tmp_path / "dispatch", basis="dispatch", **kw))
    f = found["staleness-over-bound"]
    assert f.severity == Severity.CRITICAL and f.evidence[0].observed == 5
    assert "stamped at completion instead of dispatch" in f.root_cause


def test_newest_tokens_older_than_a_completion_bound_are_a_bypass(tmp_path: Path):
    """Newest tokens 3 versions old from step 12 under a completion bound of 2: the critical, with that basis
    named and the dispatch staleness beside it."""
    found, _ = _findings(_run(tmp_path / "r", basis="completion", bound=2, old=lambda s: 5,
                              newest_lag=lambda s: 3 if s >= 12 else 1))
    f = found["staleness-over-bound"]
    assert f.severity == Severity.CRITICAL and f.first_step == 12 and f.evidence[0].observed == 3
    assert "newest token version" in f.evidence[0].metric and "completion-basis check is bypassed" in f.root_cause
    assert f.evidence[2].observed == "completion" and "from dispatch: 5" in f.evidence[2].note


def test_staleness_growing_reads_the_bounds_basis(tmp_path: Path):
    """Resumed groups dispatched 1 then 4 versions back (from step 10), newest tokens 1 version old, no bound:
    on the dispatch basis the mean rises 1.5 versions (a warning; at the warn limit of 4, so not over bound); on
    the completion basis the staleness the run bounds is flat (nothing); and rising there, it warns."""
    kw = {"bound": None, "old": lambda s: 4 if s >= 10 else 1}
    found, _ = _findings(_run(tmp_path / "dispatch", basis=None, newest_lag=lambda s: 1, **kw))
    assert set(found) == {"staleness-growing"} and found["staleness-growing"].first_step == 10
    found, _ = _findings(_run(tmp_path / "completion", basis="completion", newest_lag=lambda s: 1, **kw))
    assert found == {}
    found, _ = _findings(_run(tmp_path / "rising", basis="completion", newest_lag=lambda s: 4 if s >= 10 else 1,
                              **kw))
    f = found["staleness-growing"]
    assert f.first_step == 10 and "newest token version" in f.evidence[0].metric


@pytest.mark.parametrize("bound", [2, None])
def test_completion_basis_without_token_versions_is_insufficient_not_judged_on_dispatch(tmp_path: Path, bound):
    found, insufficient = _findings(_run(tmp_path / "r", basis="completion", bound=bound, old=lambda s: 5,
                                         newest_lag=lambda s: 1, rollouts=False))
    assert found == {}
    assert "newest token" in insufficient["staleness-over-bound"]
    assert "token versions" in insufficient["staleness-growing"]


def test_the_staleness_the_consumer_recorded_its_bound_on_is_read_first(tmp_path: Path):
    """A consumer that records ``max_bounded_staleness`` (the staleness probe's ``bounded_staleness``, schema 1.6)
    is judged on it, also without trainer_ref's config: dispatch staleness 5 with the bounded one at 1 is within a
    bound of 2; the bounded one at 3 is over it."""
    for name, bounded, over in (("within", 1, False), ("over", 3, True)):
        run = tmp_path / name
        rec = rlobs.init(run, component="trainer", prometheus=False, set_global=False, flush_interval=3600,
                         config={"mode": "separate_async", "max_staleness": 2})
        for step in range(STEPS):
            rec.emit("staleness", step=step, samples=8, max_staleness=5, mean_staleness=3.0,
                     max_bounded_staleness=bounded if step >= 10 else 1)
            rec.emit("train_step", step=step, loss=0.5, grad_norm=1.0)
        assert rec.flush(10.0)
        rec.close()
        found, _ = _findings(run)
        assert ("staleness-over-bound" in found) == over, (name, found)
        if over:
            f = found["staleness-over-bound"]
            assert f.severity == Severity.CRITICAL and f.first_step == 10 and f.evidence[0].observed == 3


@pytest.mark.parametrize("basis", ["completion", "dispatch"])
def test_a_since_step_past_the_last_consumed_step_is_named_as_the_reason(tmp_path: Path, basis):
    """``rlobs doctor --since-step`` past the record's last step: the rule says that, not that token versions (or
    staleness events) are missing, which they are not."""
    run = _run(tmp_path / "r", basis=basis, bound=2, old=lambda s: 5, newest_lag=lambda s: 1)
    with rlobs.open_run(run) as rec:
        report = diagnose(rec, rule_ids=["staleness-over-bound"], since_step=STEPS + 5)
    reason = report.insufficient["staleness-over-bound"]
    assert f"the last step that consumed samples is {STEPS + 1}, before --since-step {STEPS + 5}" == reason
    with rlobs.open_run(run) as rec:  # within the record, the rule still judges (critical on dispatch only)
        report = diagnose(rec, rule_ids=["staleness-over-bound"], since_step=STEPS - 5)
    assert ("staleness-over-bound" in {f.rule for f in report.findings}) == (basis == "dispatch")


@pytest.mark.parametrize("basis", ["completion", "dispatch"])
def test_staleness_rising_to_the_configured_bound_is_the_lag_it_allows(tmp_path: Path, basis):
    """The thirty-ninth early-warning run (6 Dec 2026): a healthy completion-basis run with 2 DP ranks (the trainer
    the slower side) had its staleness mean near 1 in its first steps and at the bound of 2 for a few steps later:
    ``staleness-growing`` warned. Rising to the bound is what the bound allows and holds; rising past it is
    ``staleness-over-bound``'s; with no bound, the same rise still warns."""
    if basis == "completion":  # newest tokens 0 then 3 versions behind (4 for half the samples), dispatched 5 back
        kw = {"old": lambda s: 5 if s >= 10 else 1, "newest_lag": lambda s: 3 if s >= 10 else 0}
    else:
        kw = {"old": lambda s: 4 if s >= 10 else 1, "newest_lag": lambda s: 1}
    found, _ = _findings(_run(tmp_path / "bounded", basis=basis, bound=4, **kw))
    assert found == {}  # mean 1.0 -> 2.5, its max 4: at the bound, not past it
    found, _ = _findings(_run(tmp_path / "unbounded", basis=basis, bound=None, **kw))
    assert set(found) == {"staleness-growing"} and found["staleness-growing"].first_step == 10
