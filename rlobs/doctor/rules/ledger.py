"""Sample-ledger rules: samples consumed twice, and samples lost (never consumed or dropped)."""

from __future__ import annotations

from typing import Mapping

from rlobs.doctor.context import RunContext
from rlobs.doctor.model import Evidence, Finding, Insufficient, RuleResult, Severity, rule


def _step_at(ctx: RunContext, ts_ns: int) -> int | None:
    s = ctx.scalar(f"SELECT max(step) FROM train_step WHERE ts_ns <= {int(ts_ns)}")
    return int(s) if s is not None else None


# a resume that rewinds the data cursor replays prompts and restores a state without the crashed run's buffered
# rollouts of those prompts, with no drop record: the lost samples are a symptom of the same rewind
@rule("ledger-samples-repeated", concern="ledger", title="Samples consumed more than once",
      needs=("ledger",), causes=("ledger-samples-skipped",))
def repeated(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """A sample id made the same transition twice (probe flag ``duplicate``) or was consumed twice:
    the exactly-once guarantee broke (typically a resume that replays consumed samples)."""
    if not ctx.count("ledger"):
        return Insufficient("no ledger events")
    suspects = ctx.suspect_samples()
    rows = ctx.rows(f"SELECT sample_id, consumed, first_consumed_step, last_consumed_step FROM {suspects} "
                    "WHERE consumed > 1 ORDER BY first_consumed_step, sample_id")
    flagged = ctx.scalar(f"SELECT count(*) FROM {suspects} WHERE duplicate")
    if not rows and not flagged:
        return []
    steps = [r[3] for r in rows if r[3] is not None]  # the repeat happens at the later consumption
    first = min(steps) if steps else ctx.scalar("SELECT min(step) FROM ledger WHERE duplicate")
    last = max(steps) if steps else ctx.scalar("SELECT max(step) FROM ledger WHERE duplicate")
    return [Finding(
        rule="ledger-samples-repeated", severity=Severity.CRITICAL,
        title=f"{len(rows)} sample(s) consumed more than once" + (f"; {flagged} duplicate transitions" if flagged else ""),
        first_step=first, last_step=last,
        evidence=[Evidence("samples consumed twice", len(rows), 0,
                           note=("e.g. " + ", ".join(r[0] for r in rows[:3])) if rows else "")],
        root_cause="a resume replayed samples that were already trained on: the data cursor or the ledger was "
                   "restored from a checkpoint older than the last consumed batch",
        confidence=0.85,
        remediation=["checkpoint the data cursor and the ledger atomically with the weights and optimiser",
                     "on resume, skip sample ids the ledger marks consumed"],
    )]


@rule("ledger-samples-skipped", concern="ledger", title="Samples lost or prompts skipped",
      needs=("ledger",), thresholds={"grace_steps": 3})
def skipped(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Samples generated long before the end that were never consumed nor dropped, or gaps in the sequence of
    dispatched prompt indices. "Long before": more than ``grace_steps`` steps, plus the run's configured
    ``max_staleness``, before the last step. A bounded-staleness trainer may end with samples that old still
    waiting in its buffer, never consumed and never dropped (a run at max staleness 8 ends with up to 8 steps
    of them: on the early-warning bench's staleness-no-is runs, 192 samples generated 4-8 steps before the end
    read as lost, a critical on 14 of 18 runs that had ended cleanly)."""
    if not ctx.count("ledger"):
        return Insufficient("no ledger events")
    from rlobs.doctor.rules.staleness import configured_bound, resume_steps

    resumes = resume_steps(ctx)

    def lost_at(step: int) -> int:
        """A sample generated before a resume and never seen again was lost at that resume (the crashed
        process's in-flight and buffered rollouts die with it): that is the step the loss happened."""
        return next((r for r in resumes if r > step), step)

    last_step = ctx.scalar("SELECT max(step) FROM train_step")
    findings_ev = []
    steps = []
    if last_step is not None:
        cutoff = int(last_step) - int(th["grace_steps"]) - (configured_bound(ctx) or 0)
        rows = ctx.rows(
            f"WITH g AS (SELECT sample_id, generated_ts ts FROM {ctx.suspect_samples()} "
            "WHERE NOT terminal AND generated_ts IS NOT NULL) "
            f"SELECT g.sample_id, s.step FROM g ASOF LEFT JOIN {ctx.step_starts()} s ON g.ts >= s.ts_ns "
            f"WHERE coalesce(s.step, -1) < {cutoff} ORDER BY s.step, g.sample_id")
        if rows:
            steps += [lost_at(int(r[1])) for r in rows if r[1] is not None]
            findings_ev.append(Evidence("samples generated but never consumed or dropped", len(rows), 0,
                                        note="e.g. " + ", ".join(str(r[0]) for r in rows[:3])))
    gaps = _prompt_gaps(ctx)
    if gaps:
        findings_ev.append(Evidence("prompt indices never dispatched", len(gaps), 0,
                                    note="e.g. " + ", ".join(map(str, gaps[:5]))))
    if not findings_ev:
        return []
    resume_step = resumes[0] if resumes else None
    first = min(steps) if steps else resume_step
    return [Finding(
        rule="ledger-samples-skipped", severity=Severity.CRITICAL,
        title="samples were lost: " + "; ".join(f"{e.observed} {e.metric}" for e in findings_ev),
        first_step=first, last_step=max(steps) if steps else resume_step, evidence=findings_ev,
        root_cause=("a resume skipped work: the data cursor was restored past prompts never trained on, or "
                    "in-flight rollouts were discarded without being recorded as dropped")
        if resume_step is not None else
        "samples vanished between generation and training (a queue discarded them without a drop record)",
        confidence=0.8,
        remediation=["checkpoint the data cursor at the last *consumed* prompt, not the last dispatched one",
                     "re-queue (or record as dropped) the rollouts in flight at checkpoint time"],
    )]


def _prompt_gaps(ctx: RunContext) -> list[int]:
    """Missing indices in prompt ids of the form '<prefix><integer>' dispatched by the generator (the first
    1000). Computed in SQL from the gaps between consecutive distinct indices: a run of 1M prompts returns
    a handful of rows, not a million indices to check in Python."""
    if not ctx.count("rollout"):
        return []
    rows = ctx.rows(
        "WITH idx AS (SELECT DISTINCT TRY_CAST(regexp_extract(p, '(\\d+)$', 1) AS BIGINT) i FROM "
        "(SELECT DISTINCT prompt_id p FROM rollout WHERE prompt_id IS NOT NULL AND prompt_id NOT LIKE 'eval%')), "
        "runs AS (SELECT i, lead(i) OVER (ORDER BY i) nxt FROM idx WHERE i IS NOT NULL) "
        "SELECT i, nxt FROM runs WHERE nxt > i + 1 ORDER BY i LIMIT 1000")
    out: list[int] = []
    for i, nxt in rows:
        out.extend(range(int(i) + 1, min(int(nxt), int(i) + 1 + 1000 - len(out))))
        if len(out) >= 1000:
            break
    return out
