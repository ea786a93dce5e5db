"""Staleness rules: consumed samples beyond the bound, staleness jumps after a resume, and stale samples trained on
without importance correction (a configuration's risk, at info)."""

from __future__ import annotations

import statistics
from typing import Mapping

from rlobs.doctor.context import RunContext
from rlobs.doctor.model import Evidence, Finding, Insufficient, RuleResult, Severity, rule
from rlobs.doctor.rules.precursors import known_correction_cap, series


def max_staleness_per_step(ctx: RunContext) -> list[tuple[int, int]]:
    """(step, max staleness of the samples it consumed), read once per diagnosis (two rules use it)."""
    return ctx.memo("max_staleness_per_step", lambda: _read_max_staleness(ctx))


def _read_max_staleness(ctx: RunContext) -> list[tuple[int, int]]:
    if ctx.count("staleness"):
        rows = ctx.rows("SELECT step, max(max_staleness) v FROM staleness WHERE step IS NOT NULL"
                        f"{ctx.step_filter()} GROUP BY step HAVING v IS NOT NULL ORDER BY step")
        if rows:
            return [(int(s), int(v)) for s, v in rows]
    rows = ctx.rows("SELECT step, max(staleness) v FROM ledger WHERE state = 'consumed' AND step IS NOT NULL"
                    f"{ctx.step_filter()} GROUP BY step HAVING v IS NOT NULL ORDER BY step")
    return [(int(s), int(v)) for s, v in rows]


def resume_steps(ctx: RunContext) -> list[int]:
    """First step of every trainer process that replaced an earlier one of the same rank (a resume)."""
    return ctx.memo("resume_steps", lambda: _read_resume_steps(ctx))


def _read_resume_steps(ctx: RunContext) -> list[int]:
    rows = ctx.rows("SELECT rank, process, min(ts_ns), min(step) FROM train_step WHERE component = 'trainer' "
                    "AND step IS NOT NULL GROUP BY rank, process ORDER BY rank, min(ts_ns)")
    out, seen = [], set()
    for rank, _proc, _ts, first_step in rows:
        if rank in seen and first_step is not None:
            out.append(int(first_step))
        seen.add(rank)
    return sorted(set(out))


def configured_bound(ctx: RunContext) -> int | None:
    bound = ctx.cfg("max_staleness", "staleness.max_staleness", "trainer.max_staleness")
    if bound is None or not isinstance(bound, (int, float)) or bound < 0:
        return None
    return int(bound)


def staleness_basis(ctx: RunContext) -> str:
    """What the configured bound is checked on: ``dispatch`` (the default, and every framework's but
    trainer_ref's option) or ``completion`` (trainer_ref ``--staleness-basis completion``: the newest policy version
    that wrote any of a group's tokens, so a group resumed across weight syncs is kept; its older tokens are
    importance-corrected)."""
    basis = ctx.cfg("staleness_basis", "staleness.staleness_basis", "trainer.staleness_basis")
    if basis == "completion" or _recorded_bounded(ctx):
        return "completion"
    return "dispatch"


def _recorded_bounded(ctx: RunContext) -> bool:
    """The consumer recorded the staleness its bound is checked on (``staleness.max_bounded_staleness``, schema
    1.6: the staleness probe's ``bounded_staleness``)."""
    return bool(ctx.count("staleness")) and ctx.memo("recorded_bounded", lambda: bool(ctx.scalar(
        "SELECT count(max_bounded_staleness) FROM staleness")))


def bounded_staleness_per_step(ctx: RunContext) -> list[tuple[int, int]]:
    """(step, max staleness of the samples it consumed) on the basis the run's bound is checked on: the dispatch
    staleness (``max_staleness_per_step``), or under the completion basis what the consumer recorded as
    ``max_bounded_staleness``, or else (records before schema 1.6) the trainer version at consumption minus the
    newest token version of the sample's group (the ledger's consumed staleness plus the sample's dispatch version,
    from its ``rollout`` event; empty when the rollouts carry no token versions)."""
    if staleness_basis(ctx) == "dispatch":
        return max_staleness_per_step(ctx)
    if _recorded_bounded(ctx):
        return [(int(s), int(v)) for s, v in ctx.rows(
            "SELECT step, max(max_bounded_staleness) v FROM staleness WHERE step IS NOT NULL"
            f"{ctx.step_filter()} GROUP BY step HAVING v IS NOT NULL ORDER BY step")]
    return [(s, int(mx)) for s, mx, _ in completion_staleness_per_step(ctx)]


def completion_staleness_per_step(ctx: RunContext) -> list[tuple[int, float, float]]:
    """(step, max, mean) of the completion-basis staleness of the samples each step consumed (see
    ``bounded_staleness_per_step``), read once per diagnosis."""
    return ctx.memo("completion_staleness_per_step", lambda: _read_completion_staleness(ctx))


def _read_completion_staleness(ctx: RunContext) -> list[tuple[int, float, float]]:
    if not ctx.count("rollout") or not ctx.count("ledger"):
        return []
    rows = ctx.rows(
        "WITH r AS (SELECT sample_id, any_value(group_id) AS group_id, max(dispatch_version) AS dispatch_version "
        "FROM rollout WHERE sample_id IS NOT NULL AND max_token_version IS NOT NULL GROUP BY sample_id), "
        "g AS (SELECT group_id, max(max_token_version) AS newest FROM rollout WHERE group_id IS NOT NULL "
        "GROUP BY group_id) "
        "SELECT l.step, max(l.staleness + r.dispatch_version - g.newest) AS v, "
        "avg(l.staleness + r.dispatch_version - g.newest) FROM ledger l "
        "JOIN r ON r.sample_id = l.sample_id JOIN g ON g.group_id = r.group_id "
        f"WHERE l.state = 'consumed' AND l.step IS NOT NULL AND l.staleness IS NOT NULL{ctx.step_filter('l.step')} "
        "GROUP BY l.step HAVING v IS NOT NULL ORDER BY l.step")
    return [(int(s), float(v), float(m)) for s, v, m in rows]


@rule("staleness-over-bound", concern="staleness", title="Consumed samples staler than the bound",
      needs=("staleness", "ledger"), thresholds={"warn_versions": 4},
      causes=("parity-drift", "grad-norm-spike", "ledger-samples-skipped"))
def over_bound(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Critical when a consumed sample is staler than the configured ``max_staleness`` (the defence is
    bypassed); warning when staleness exceeds ``warn_versions`` and no tighter bound is configured.

    Staleness is counted on the basis the bound is checked on (``staleness_basis``): from dispatch, or under
    trainer_ref's completion basis from the newest version that wrote the group's tokens. There a group resumed
    across weight syncs is kept by design with older first tokens (importance-corrected), so its dispatch staleness
    above the bound is no bypass; it shows in the evidence."""
    basis = staleness_basis(ctx)
    series = bounded_staleness_per_step(ctx)
    if not series:
        last = ctx.scalar("SELECT max(step) FROM ledger WHERE state = 'consumed'") if ctx.count("ledger") else None
        if ctx.since_step is not None and last is not None and int(last) < ctx.since_step:
            return Insufficient(f"the last step that consumed samples is {int(last)}, before --since-step "
                                f"{ctx.since_step}")
        if basis == "completion":
            return Insufficient("the bound is checked on the completion (newest token) version, and no consumed "
                                "sample has a rollout event with its token versions")
        return Insufficient("no consumed-sample staleness (staleness events or ledger consumed transitions)")
    bound = configured_bound(ctx)
    if bound is not None and bound <= th["warn_versions"]:
        limit, sev = bound, Severity.CRITICAL
    else:
        limit, sev = int(th["warn_versions"]), Severity.WARNING
    bad = [(s, v) for s, v in series if v > limit]
    if not bad:
        return []
    first, last = bad[0][0], bad[-1][0]
    worst = max(v for _, v in bad)
    if bound is None:
        cause = "no staleness bound is configured: the generator runs ahead of the trainer unchecked"
    elif bound > limit:
        cause = f"the configured bound ({bound}) is too loose for this workload: the generator runs ahead"
    elif basis == "completion":
        cause = ("samples whose group's newest tokens are older than the configured bound were consumed: the "
                 "completion-basis check is bypassed")
    else:
        cause = ("samples older than the configured bound were consumed: the check is bypassed or applied to "
                 "the wrong version (stamped at completion instead of dispatch)")
    what = ("max staleness (trainer version - the group's newest token version: the bound's basis)"
            if basis == "completion" else "max staleness")
    ev = [Evidence(what, worst, limit, (first, last), f"{len(bad)} steps over the limit"),
          Evidence("configured max_staleness", "unset" if bound is None else bound)]
    if basis == "completion":
        ev.append(Evidence("staleness_basis", "completion", note="max staleness from dispatch: "
                           f"{max((v for _, v in max_staleness_per_step(ctx)), default='unknown')}"))
    return [Finding(
        rule="staleness-over-bound", severity=sev,
        title=f"staleness reached {worst} versions (limit {limit}) from step {first}",
        first_step=first, last_step=last,
        evidence=ev,
        root_cause=cause, confidence=0.8,
        remediation=["set max_staleness (drop older samples at consumption) and a rollout TTL",
                     "bound the rollout queue so the generator blocks instead of running ahead",
                     "apply truncated importance sampling to what remains off-policy"],
    )]


@rule("staleness-jump-after-resume", concern="staleness", title="Staleness jumps right after a resume",
      needs=("staleness", "manifest"), thresholds={"jump_versions": 2, "window": 3},
      causes=("staleness-over-bound", "ledger-samples-repeated", "ledger-samples-skipped"))
def jump_after_resume(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """After each trainer restart (a later trainer process), compare max staleness in the ``window`` steps
    after the resume with the steps before it: a rise of ``jump_versions`` or more is a finding."""
    series = dict(max_staleness_per_step(ctx))
    if not series:
        return Insufficient("no consumed-sample staleness")
    out = []
    w = int(th["window"])
    for resume_step in resume_steps(ctx):
        if resume_step is None:
            continue
        before = [v for s, v in series.items() if resume_step - 2 * w <= s < resume_step]
        after = [(s, v) for s, v in series.items() if resume_step <= s < resume_step + w]
        if not after:
            continue
        base = max(before) if before else 0
        peak_step, peak = max(after, key=lambda sv: sv[1])
        if peak - base >= th["jump_versions"]:
            out.append(Finding(
                rule="staleness-jump-after-resume", severity=Severity.WARNING,
                title=f"staleness jumped from {base} to {peak} versions right after the resume at step {resume_step}",
                first_step=int(resume_step), last_step=int(peak_step),
                evidence=[Evidence("max staleness after resume", peak, base + th["jump_versions"],
                                   (int(resume_step), int(peak_step)), f"before resume: {base}")],
                root_cause="rollouts generated before the crash (old versions) were replayed into the restored "
                           "trainer, or the restored policy version does not match the generator's",
                confidence=0.7,
                remediation=["drop or re-version queued rollouts on resume (apply max_staleness to them)",
                             "checkpoint the policy version with the weights and push it to the generator first"],
            ))
    return out


@rule("staleness-uncorrected", concern="staleness", title="Stale samples trained on without importance correction",
      needs=("staleness",), thresholds={})
def uncorrected(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Info: the loss applies no importance correction (cap 0) while the consumed samples are ``min_versions``
    versions stale or more (median of the last ``window`` steps' mean staleness, ``min_steps`` running). A
    configuration's risk, not a precursor: on trainer_ref's tiny-packed most runs so configured at max staleness 4
    fell within 40 steps, and nothing in their records told them from the few that learned (so it is not a warning:
    ``precursor-uncorrected-off-policy`` warns when the importance ratios show the drift). Quiet when the
    correction is on or the record does not say."""
    stale = series(ctx, "staleness")
    if not stale:
        return Insufficient("no staleness events with mean_staleness")
    cap = known_correction_cap(ctx)
    if isinstance(cap, Insufficient):
        return cap
    if cap > 0:
        return []
    w, need, bar = int(th["window"]), int(th["min_steps"]), th["min_versions"]
    run = 0
    for i in range(w - 1, len(stale)):
        level = statistics.median(v for _, v in stale[i - w + 1:i + 1])
        run = run + 1 if level >= bar else 0
        if run < need:
            continue
        first, step = stale[i - run + 1][0], stale[i][0]
        peak = max(v for _, v in stale[i - w + 1:])
        return [Finding(
            rule="staleness-uncorrected", severity=Severity.INFO,
            title=(f"samples {level:.1f} versions stale (median of {w} steps) trained on without importance "
                   f"correction from step {step}: a configuration that often collapses"),
            first_step=step, last_step=stale[-1][0],
            evidence=[Evidence("staleness.mean_staleness", round(level, 3), bar, (first, step),
                               f"median of the last {w} steps, {run} steps running; the highest step from then on: {peak:.2f}"),
                      Evidence("importance correction cap (tis_cap)", cap, None, None,
                               "0: the loss uses the stale samples as if on-policy"),
                      Evidence("base rate (bench/early_warning.py, tiny-packed, 40 steps)",
                               "31 of 40 fell, 4 of 40 learned", None, None,
                               "separate_async without correction at max staleness 4; at max staleness 2: 4 of 20 "
                               "fell, 13 of 20 learned (README, Early warning, twenty-second run)")],
            root_cause=("the generator runs ahead of the trainer and the loss treats its samples as on-policy: each "
                        "update follows policies several versions old, a bias that grows with the lag"),
            confidence=0.5,
            remediation=["turn truncated importance sampling on (trainer_ref: --tis-cap 2; verl: rollout "
                         "correction / TIS; AReaL: decoupled PPO)",
                         "or tighten max_staleness to 1-2 versions",
                         "watch rlobs doctor RUN --rule precursor-uncorrected-off-policy (warns when the importance "
                         "ratios show the drift)"],
        )]
    return []
