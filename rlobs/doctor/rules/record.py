"""Rules about the record itself and liveness: telemetry drops, damaged segments, lost processes, silent components."""

from __future__ import annotations

import json
from typing import Mapping

from rlobs.doctor.context import RunContext
from rlobs.doctor.model import Evidence, Finding, Insufficient, RuleResult, Severity, rule


@rule("telemetry-drops", concern="telemetry", title="Telemetry events were dropped", needs=("telemetry",))
def drops(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """The recorders reported dropped events (queue full, a failing or slow sink): the evidence for the
    other rules is incomplete for the affected processes."""
    rows = ctx.rows("SELECT component, reason, sink, sum(dropped) n, min(step), max(step) FROM telemetry "
                    "WHERE dropped > 0 GROUP BY ALL ORDER BY n DESC")
    if not rows:
        return []
    total = sum(r[3] for r in rows)
    run_store_lost = any(r[2] in ("runstore", "recorder") for r in rows)
    return [Finding(
        rule="telemetry-drops", severity=Severity.WARNING if run_store_lost else Severity.INFO,
        title=f"{total:,} telemetry events dropped ({', '.join(f'{r[0]}/{r[1]}@{r[2]}: {r[3]:,}' for r in rows[:3])})",
        first_step=min((r[4] for r in rows if r[4] is not None), default=None),
        last_step=max((r[5] for r in rows if r[5] is not None), default=None),
        evidence=[Evidence(f"telemetry[{r[1]}, sink={r[2]}].dropped", int(r[3]), 0, note=f"component {r[0]}")
                  for r in rows[:5]],
        root_cause="a sink could not keep up or failed (disk full or read-only, OTLP endpoint down) or the "
                   "recorder queue overflowed; training was not blocked, but evidence is missing",
        confidence=0.9,
        remediation=["check the disk of the run directory and the OTLP collector",
                     "raise max_queue in rlobs.init, or emit fewer per-sample events"],
    )]


@rule("record-damaged", concern="record", title="Part of the record is missing (a process was killed)",
      needs=("manifest",))
def damaged(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """Processes that never closed their recorder (killed) and segments that could not be read in full."""
    rec = ctx.record
    lost = [p for p in rec.processes if p.status == "lost"]
    broken = [p for p in rec.problems if p.problem in ("truncated", "unreadable", "schema", "malformed")]
    if not lost and not broken:
        return []
    ev = []
    restarted = _restarts(ctx)
    for p in lost:
        last = ctx.rows("SELECT max(ts_ns), max(step) FROM events WHERE process = ?", [p.process])
        back = restarted.get(str(p.pid))
        ev.append(Evidence(f"process {p.process}", "killed", "clean close",
                           note=f"{p.component} rank {p.rank}; last step recorded {last[0][1] if last else '?'}"
                           + (f"; restarted by Ray at step {back.get('step')}, back after {back.get('wait_s')} s "
                              "(incident actor_restart)" if back else "")))
    for b in broken[:10]:
        what = "process file" if b.kind == "process" else "segment"
        ev.append(Evidence(f"{what} {b.path.rsplit('/', 1)[-1]}", b.problem, "complete",
                           note=f"{b.rows_read} rows read; {b.detail[:100]}"))
    return [Finding(
        rule="record-damaged", severity=Severity.WARNING if broken else Severity.INFO,
        title=f"{len(lost)} process(es) ended without closing their recorder"
              + (f" ({sum(str(p.pid) in restarted for p in lost)} restarted and recovered)" if restarted else "")
              + f"; {len(broken)} damaged segment(s)",
        first_step=None, last_step=None, evidence=ev,
        root_cause="a process was killed (OOM, SIGKILL, node loss) or files were damaged: every complete batch "
                   "before the damage was read; at most the last flush interval per killed process is missing",
        confidence=1.0,
        remediation=["look for the kill reason in the process logs (dmesg for the OOM killer)",
                     "rlobs info RUN lists every segment that could not be read in full"],
    )]


def _restarts(ctx: RunContext) -> dict[str, dict]:
    """pid of the dead instance -> the ``actor_restart:*`` incident that recorded its replacement."""
    if not ctx.count("incident"):
        return {}
    out = {}
    for (detail,) in ctx.rows("SELECT detail FROM incident WHERE fault LIKE 'actor_restart:%'"):
        try:
            d = json.loads(detail)
            out[str(d["old"]).split(":")[0]] = d
        except (TypeError, ValueError, KeyError):
            continue
    return out


def run_allowance_s(ctx: RunContext, end_ns: int) -> float:
    """The no-progress alert's allowance at ``end_ns``, read from the record (its numbers: the failure table's
    ``no-progress``): ``step_multiple`` x the trainer's mean optimiser-plus-data-wait seconds per step over the hour
    before, plus, while a declared pause is open (its heartbeat newer than its last phase event), ``pause_multiple``
    x the slowest kind's mean completed pause over 6 hours, at least ``pause_floor_seconds``. 0 without either."""
    from rlobs.failures import failure
    from rlobs.schema import PAUSE_PHASES

    th = failure("no-progress").alert_thresholds
    allow = 0.0
    if ctx.count("train_step"):
        busy = ctx.scalar("SELECT avg(coalesce(step_seconds, 0) + coalesce(data_wait_s, 0)) FROM train_step "
                          f"WHERE ts_ns <= {int(end_ns)} AND ts_ns > {int(end_ns - 3600e9)}")
        allow = th["step_multiple"] * float(busy or 0.0)
    if ctx.count("phase"):
        verbs = ", ".join(f"'{v}'" for v in PAUSE_PHASES)
        nouns = ", ".join(f"'{n}'" for n in PAUSE_PHASES.values())
        upto = f"ts_ns <= {int(end_ns)}"
        began = ctx.scalar(f"SELECT max(ts_ns) FROM heartbeat WHERE phase IN ({verbs}) AND {upto}")
        ended_ns = ctx.scalar(f"SELECT max(ts_ns) FROM phase WHERE phase IN ({nouns}) AND {upto}")
        mean_s = ctx.scalar(f"SELECT max(a) FROM (SELECT avg(seconds) a FROM phase WHERE phase IN ({nouns}) AND "
                            f"{upto} AND ts_ns > {int(end_ns - 6 * 3600e9)} GROUP BY phase)")
        if began is not None and (ended_ns is None or began > ended_ns):
            allow += max(th["pause_multiple"] * float(mean_s or 0.0), th["pause_floor_seconds"])
    return allow


@rule("heartbeat-lost", concern="liveness", title="A component stopped sending heartbeats",
      needs=("heartbeat",), thresholds={"silence_s": 120.0})
def heartbeat_lost(ctx: RunContext, th: Mapping[str, float]) -> RuleResult:
    """A component's last heartbeat is older than the newest event of the run by more than ``silence_s`` and more
    than the run's no-progress allowance (``run_allowance_s``: a trainer that beats once a step is silent for a
    step; a grader idle through a declared evaluation for the evaluation): it hung (or died) while the others went
    on. The last phase it named is where it is stuck."""
    if not ctx.count("heartbeat"):
        return Insufficient("no heartbeat events")
    end = ctx.scalar("SELECT max(ts_ns) FROM events")
    rows = ctx.rows("SELECT process, component, max(ts_ns) last, arg_max(phase, ts_ns) FROM heartbeat GROUP BY ALL")
    ended = {p.process for p in ctx.record.processes if p.status == "ended"}
    limit = max(th["silence_s"], run_allowance_s(ctx, end))
    out = []
    for proc, comp, last, phase in rows:
        silence = (end - last) / 1e9
        if silence > limit and proc not in ended:
            out.append(Finding(
                rule="heartbeat-lost", severity=Severity.CRITICAL,
                title=f"{comp} ({proc}) silent for {silence:.0f} s, last seen in phase {phase!r}",
                first_step=None, last_step=None,
                evidence=[Evidence(f"heartbeat[{comp}] silence", round(silence, 1), round(limit, 1),
                                   note=f"last phase {phase}; the limit is {th['silence_s']:g} s or the run's "
                                        "no-progress allowance, whichever is longer")],
                root_cause=f"{comp} is stuck in {phase!r} (a hung grader, a deadlocked collective, a blocked "
                           "queue) or died without closing its recorder",
                confidence=0.7,
                remediation=[f"py-spy dump --pid <pid of {comp}> to see where it is stuck",
                             "rlobs doctor RUN --rule grader-hung"],
            ))
    return out
