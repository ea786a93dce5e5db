"""Prometheus alert rules for rlobs, as data: one ``AlertRule`` per failure that can be seen live.

Every rule carries ``severity``, ``summary``, ``description`` and a ``runbook_url`` built from ONE
pattern (``runbook_url(id)`` = ``RUNBOOK_BASE_URL`` + ``<id>.md``; the page is ``runbooks/<id>.md``),
and a ``PromtoolCase``: synthetic input series with the time the alert must not yet fire and the
time it must fire, with its labels and rendered annotations. ``rules_yaml()`` and
``promtool_tests_yaml()`` render both files from this one table (``rlobs dashboards build``).

Thresholds are ``AlertThresholds`` fields with field-derived defaults; change them in one place.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from rlobs.dashboards.model import to_yaml
from rlobs.dashboards.selectors import (
    ALERT,
    GROUP,
    Scope,
    agg,
    histogram_mean,
    increase,
    metric_names,
    new_or_increase,
    rate,
    series,
    up,
)
from rlobs.runbooks import PUBLISHED_BASE
from rlobs.runbooks import runbook_url as _runbook_url
from rlobs.schema import PAUSE_PHASES

RUNBOOK_BASE_URL = PUBLISHED_BASE
RULE_GROUP = "rlobs"
SEVERITIES = ("critical", "warning", "info")


def runbook_url(runbook_id: str, base: str | None = None) -> str:
    """The one pattern every alert's (and doctor finding's) runbook link follows: ``<base>/<id>.md``, with
    the base from ``--runbook-base-url`` or ``RLOBS_RUNBOOK_BASE_URL`` (see ``rlobs.runbooks``), else
    rlobs' published pages."""
    return _runbook_url(runbook_id, base)


def _doctor_thresholds(rule_id: str) -> Mapping[str, float]:
    """A failure's shared numbers (rlobs.failures): the doctor rule of the same failure reads the same ones."""
    from rlobs.failures import failure

    f = failure(rule_id)
    return {**f.thresholds, **f.alert_thresholds}


def _th(fid: str, name: str) -> float:
    return float(_doctor_thresholds(fid)[name])


@dataclass(frozen=True, slots=True)
class AlertThresholds:
    """Alert thresholds; the defaults come from the field notes in DESIGN.md, from the doctor's rule of the
    same failure where there is one, and from healthy trainer_ref runs of every mode (no page)."""

    staleness_max_versions: int = field(  # set to the run's max_staleness bound
        default_factory=lambda: int(_th("staleness-over-bound", "warn_versions")))
    sync_boundary_mean_seconds: float = field(default_factory=lambda: _th("weight-sync-slow", "boundary_mean_seconds"))  # mean duration of one sync boundary over 10 min
    advantage_abs_max: float = field(default_factory=lambda: _th("advantage-denominator-collapse", "max_abs_advantage"))  # GRPO |advantage| is <= sqrt(G-1) (~4 at G=16) with a sane std
    # mean share over 10 min, the doctor's share: a max over the last batch flapped 21 times on a healthy run
    zero_std_groups_ratio: float = field(default_factory=lambda: _th("advantage-zero-std-groups", "ratio"))
    # ... unless the task is solved (rlobs.failures.SOLVED, the doctor's numbers)
    solved_reward: float = field(default_factory=lambda: _th("advantage-zero-std-groups", "solved_reward"))
    solved_heldout: float = field(default_factory=lambda: _th("advantage-zero-std-groups", "solved_heldout"))
    solved_gap: float = field(default_factory=lambda: _th("advantage-zero-std-groups", "solved_gap"))
    grader_timeout_ratio: float = field(default_factory=lambda: _th("grader-timeouts", "share"))
    # the trainer waits over this share of its time AND this many times its own share of the previous hour:
    # a generation-bound run (0.58 on CPU, healthy) is its own baseline, a starved one departs from it
    trainer_data_wait_ratio: float = field(default_factory=lambda: _th("trainer-starved", "wait_share"))
    trainer_data_wait_vs_baseline: float = field(default_factory=lambda: _th("trainer-starved", "vs_baseline"))
    # < 0.005 healthy, > 0.01 a problem
    parity_mean_abs_dlogp: float = field(default_factory=lambda: _th("parity-drift", "critical"))
    heartbeat_silence_seconds: float = field(default_factory=lambda: _th("heartbeat-lost", "silence_s"))
    process_down_for: str = "30s"  # a target that stops answering scrapes this long
    # no optimiser step for max(floor, multiple x the recent mean step interval)
    no_progress_floor_seconds: float = field(default_factory=lambda: _th("no-progress", "floor_seconds"))
    # the doctor's watcher: no evaluation for max(this, doctor_behind_interval_multiple x its interval)
    doctor_behind_min_seconds: float = field(default_factory=lambda: _th("doctor-behind", "min_seconds"))
    doctor_behind_interval_multiple: float = field(default_factory=lambda: _th("doctor-behind", "interval_multiple"))
    no_progress_step_multiple: float = field(default_factory=lambda: _th("no-progress", "step_multiple"))
    # a declared pause (held-out evaluation, checkpoint save, drain) adds this many times the slowest kind's mean
    # length, at least the floor (a run's first pause has no history): the thirtieth early-warning run's evaluations
    # took 5.6-11.6x the step yardstick while the run was healthy
    no_progress_pause_multiple: float = field(default_factory=lambda: _th("no-progress", "pause_multiple"))
    no_progress_pause_floor_seconds: float = field(default_factory=lambda: _th("no-progress", "pause_floor_seconds"))
    # grader p95 latency over 5 min vs its own p95 over the previous hour (the doctor's grader-slow numbers)
    grader_slow_ratio: float = field(default_factory=lambda: float(_doctor_thresholds("grader-slow")["ratio"]))
    grader_slow_min_seconds: float = field(
        default_factory=lambda: float(_doctor_thresholds("grader-slow")["min_seconds"]))
    # calls wait in the grader queue longer than they run, and seconds long: the pool is saturated (healthy
    # trainer_ref runs: p95 queue wait 0.005-0.02 s; a 4 s grader behind 2 workers, admission-bounded: 4.8 s)
    # (idle machine: a 4 s grader behind 2 workers waits 3.97 s p95, right at 1x: half its latency is the bar)
    grader_backlog_ratio: float = field(default_factory=lambda: _th("grader-backlog", "ratio"))
    grader_backlog_min_seconds: float = field(default_factory=lambda: _th("grader-backlog", "min_seconds"))


# The step time the precursor alerts' windows are built for: the last 10 minutes hold 5 optimiser steps, the hour
# before 30 (the doctor's rules count steps). `rlobs dashboards build --step-seconds S` writes the rules for steps of
# S seconds: every window and `for` of the precursor alerts scaled by S / PRECURSOR_STEP_SECONDS, the same steps
PRECURSOR_STEP_SECONDS = 120
T = AlertThresholds()
_W10 = ALERT.with_window("10m")

# Default labels of a series in promtool cases (what a scrape through file_sd produces).
CASE_LABELS = {"run": "r1", "component": "trainer", "job": "rlobs", "instance": "127.0.0.1:9101", "rank": "0"}


@dataclass(frozen=True, slots=True)
class PromtoolCase:
    """Synthetic input for ``promtool test rules``: quiet until ``onset`` (minutes), then faulty."""

    series: tuple[tuple[str, Mapping[str, str], str], ...]  # (name, extra labels, values)
    value_text: str  # how the description renders $value at the firing time
    labels: Mapping[str, str] = field(default_factory=dict)  # alert labels beyond run/component/severity
    not_yet_min: int = 0  # eval time (minutes) where the alert must not be firing yet
    firing_min: int = 0  # eval time (minutes) where it must fire
    component: str = "trainer"
    query_text: str = ""  # how a {{ with query ... }} block of the description renders at the firing time
    up: bool = True  # feed `up == 1` for the case's target (gated rules stop once it goes stale)
    up_component: str = ""  # the target whose `up` gates the rule, when not the case's component (the doctor's alert)


@dataclass(frozen=True, slots=True)
class AlertRule:
    id: str
    severity: str
    expr: str
    for_: str
    summary: str
    description: str
    case: PromtoolCase
    # the step time a precursor alert's windows and `for` are built for (precursor_rules(step_seconds=...)); its
    # `for` is the failure table's scaled to it, and so is the time of its promtool case
    step_seconds: float = PRECURSOR_STEP_SECONDS

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", self.id):
            raise ValueError(f"alert id {self.id!r}: use kebab-case")
        if self.severity not in SEVERITIES:
            raise ValueError(f"alert {self.id!r}: severity {self.severity!r}; valid: {SEVERITIES}")
        from rlobs.failures import check_alert

        # the failure table is the source: no silent drift
        check_alert(self.id, self.severity, self.for_,
                    scale=None if self.step_seconds == PRECURSOR_STEP_SECONDS
                    else (lambda d: scaled_duration(d, self.step_seconds)))

    @property
    def name(self) -> str:
        return "Rlobs" + "".join(p.capitalize() for p in self.id.split("-"))

    @property
    def runbook_url(self) -> str:
        return runbook_url(self.id)

    @property
    def labels(self) -> dict[str, str]:
        """Labels the rule adds to its alerts: ``severity``, and ``runbook`` (the runbook's id), which the
        ``ALERTS`` series carries too, so a dashboard table of active alerts can link each one's page."""
        return {"severity": self.severity, "runbook": self.id}

    def annotations(self, base: str | None = None) -> dict[str, str]:
        return {"summary": self.summary, "description": self.description, "runbook_url": runbook_url(self.id, base)}


def _gt(expr: str, threshold: float) -> str:
    return f"{expr} > {threshold:g}"


def _rate(name: str, scope: Scope, offset: str = "") -> str:
    """``rate`` over the scope's window, ``offset`` back in time (a baseline that excludes the present)."""
    return rate(name, scope) if not offset else f"rate({series(name, scope)}[{scope.window}] offset {offset})"


def _task_solved(window: str) -> str:
    """Runs whose task is solved, the doctor's ``task_solved`` read live over ``window``: the training reward's mean
    at least ``solved_reward`` and every reading in [0, 1], and the lowest held-out success the run reported (its
    gauge holds the last evaluation until the next) at least ``solved_heldout`` and within ``solved_gap`` of that
    mean. A run that reports no held-out success is never solved here (a grader constant at 1 looks the same from
    the training reward alone)."""
    def over(fn: str, name: str, by: str = "max") -> str:
        return agg(by, f"{fn}({series(name, ALERT)}[{window}])", ("run",))

    reward = over("avg_over_time", "rlobs_reward_mean")
    held = over("min_over_time", "rlobs_heldout_success", "min")
    return (f"(({reward} >= {T.solved_reward:g}) and on (run) ({over('max_over_time', 'rlobs_reward_mean')} <= 1) "
            f"and on (run) ({over('min_over_time', 'rlobs_reward_mean', 'min')} >= 0) "
            f"and on (run) ({held} >= {T.solved_heldout:g}) and on (run) ({held} - {reward} >= -{T.solved_gap:g}))")


def running(expr: str, by: tuple[str, ...] = GROUP) -> str:
    """``expr`` only while a process of its group is up. A process that ends cleanly removes its target
    (rlobs.sinks.targets), so every alert gated here stops the moment a run finishes, even one whose
    window (a rate, a max_over_time) still holds the run's last minutes."""
    return f"({expr}) and on ({', '.join(by)}) ({agg('max', up(ALERT), by)} == 1)"


def trainer_wait_share(scope: Scope, by: tuple[str, ...] = (), offset: str = "") -> str:
    """Share of trainer time spent waiting for batches: wait / (wait + optimiser step).

    A ratio of two rates over the same window, so it is right even for a series younger than the
    window (a bare ``rate`` would be diluted by the empty part of the window) and for many ranks.
    """
    wait = agg("sum", _rate("rlobs_trainer_data_wait_seconds_total", scope, offset), by)
    step = agg("sum", _rate("rlobs_trainer_step_seconds_total", scope, offset), by)
    return f"{wait} / ({wait} + {step})"


def _counter_alert(metric: str, by: tuple[str, ...] = GROUP, **labels: str | tuple[str, str]) -> str:
    return _gt(agg("sum", new_or_increase(metric, _W10, **labels), by), 0)


_BORN = "_x6 1x13"  # a counter series born at minute 6 (prometheus_client creates it on first event)
_PROC = (*GROUP, "rank", "instance")  # one process (target)
_HB = "rlobs_heartbeat_timestamp_seconds"
_LAST_STEP = agg("max", series("rlobs_train_step_last_timestamp_seconds", ALERT), GROUP)
# the trainer's wall time per step while it progresses: (optimiser time + data wait) / steps over an hour. Both
# counters move only when a step completes, so a stall does not stretch its own yardstick (a rate of steps
# over the window did: 5 steps then a stall read as a 15 min interval)
_W1H = ALERT.with_window("1h")


def _step_interval() -> str:
    """Each run's trainer seconds per step (optimiser plus data wait) over the last hour."""
    run = ("run",)
    return (f"(({agg('sum', increase('rlobs_trainer_step_seconds_total', _W1H), run)} + "
            f"{agg('sum', increase('rlobs_trainer_data_wait_seconds_total', _W1H), run)}) / "
            f"{agg('sum', increase('rlobs_train_steps_total', _W1H), run)})")

# Who to look at first when nothing progresses: a process of the run that does not answer scrapes (died,
# stopped), else the one whose heartbeat is oldest. (Oldest heartbeat alone named an idle grader on a fast
# machine: graders that finished their last batch before the generator stopped had older heartbeats.)
_SUSPECT = ('{{ with query (printf "(max by (component) (up{run=\\"%s\\"} == 0)) or (bottomk(1, max by (component) '
            '(max_over_time(' + _HB + '{run=\\"%s\\"}[15m]))) unless on () (count(up{run=\\"%s\\"} == 0) > 0))" '
            '$labels.run $labels.run $labels.run) }}{{ . | first | label "component" }}{{ end }}')
_DOCTOR_ONSET = ('{{ with query (printf "min(rlobs_doctor_finding_first_step{run=\\"%s\\",rule=\\"%s\\"})" '
                 '$labels.run $labels.rule) }}{{ . | first | value }}{{ end }}')
# the doctor's alerts hold while a process of the run other than the doctor is up (a run that ended cleanly, its
# targets gone, pages nobody; the doctor's own target lingers until its next evaluation sees the end)
_RUN_UP = f" and on ({GROUP[0]}) ({agg('max', up(ALERT, component=('!=', 'doctor')), (GROUP[0],))} == 1)"
_LAST_PHASE = ('{{ with query (printf "topk(1, ' + _HB + '{run=\\"%s\\",component=\\"%s\\",rank=\\"%s\\"})" '
               '$labels.run $labels.component $labels.rank) }}{{ . | first | label "phase" }}{{ end }}')


def _progress() -> str:
    """By ``run``: the wall time of its last progress, the later of its trainer's last optimiser step and the end of
    its last declared pause (``PAUSE_PHASES``: a held-out evaluation, a checkpoint save, a drain)."""
    ends = series("rlobs_phase_end_timestamp_seconds", ALERT, phase=("=~", "|".join(PAUSE_PHASES.values())))
    return agg("max", f"{series('rlobs_train_step_last_timestamp_seconds', ALERT)} or {ends}", ("run",))


def fresh_data(recent: str, t: AlertThresholds | None = None) -> str:
    """By ``run``: it progressed (``_progress``: a step, or a declared pause's end) within the last ``recent``, or
    within ``recent`` plus the pause allowance of ``no_progress_expr`` while a declared pause is under way (a held-out
    evaluation, a checkpoint save, a drain: ``_pause_allowance``), so a precursor alert's recent window holds a
    reading taken since or the run is in a pause it declared. A trainer that no longer steps but still answers scrapes
    (a hang, or anything after its last step that it does not declare) serves its last readings, and windows of held
    readings compare them with a history that slides over fewer and fewer real steps: the reward-hacking alert paged
    healthy runs 13-23 minutes after their last step (the forty-seventh and forty-eighth early-warning runs). Without
    the pause allowance it shut inside a declared evaluation of 7.1 mean steps (the forty-seventh run, reverted);
    ``bench/progress_gaps.py`` measures the spans it must outlast on real records. Kept by the forty-ninth run: on 17
    fresh runs replayed live it was read open at every read from step 5 to the last step (so the gated alerts were the
    alerts before while the runs stepped) and no alert went pending after a run's last progress. ``t``: the pause
    allowance's thresholds (default: the committed ones)."""
    t = t or T
    return f"((time() - {_progress()}) <= ({duration_seconds(recent):g} + {_pause_allowance(t)}))"


def _pause_allowance(t: AlertThresholds) -> str:
    """By ``run``: while a declared pause is under way (its heartbeat on entry newer than the last pause's end), how
    much longer than its step allowance a run may go without progress: ``pause_multiple`` times the mean length of
    the slowest kind of pause over the last 6 hours, at least ``pause_floor_seconds``; 0 otherwise."""
    run, per = ("run",), ("run", "phase")
    verbs, nouns = ("=~", "|".join(PAUSE_PHASES)), ("=~", "|".join(PAUSE_PHASES.values()))
    beats = agg("max", series(_HB, ALERT, phase=verbs), run)  # a pause's heartbeat on entry ...
    ends = series("rlobs_phase_end_timestamp_seconds", ALERT, phase=nouns)  # ... and its phase event on exit
    last_end = agg("max", ends, run)
    in_pause = f"(({beats} > {last_end}) or ({beats} unless on (run) {last_end}))"
    w6h = ALERT.with_window("6h")
    pause_mean = agg("max", f"{agg('sum', new_or_increase('rlobs_phase_seconds_total', w6h, phase=nouns), per)} / "
                            f"{agg('sum', new_or_increase('rlobs_phases_total', w6h, phase=nouns), per)}", run)
    pause_allow = (f"clamp_min(({t.no_progress_pause_multiple:g} * {pause_mean} > 0) or (0 * {beats}), "
                   f"{t.no_progress_pause_floor_seconds:g})")
    return f"(({pause_allow} and on (run) {in_pause}) or (0 * {_progress()}))"


def _run_allowance(t: AlertThresholds) -> tuple[str, str]:
    """(progress, allowance) of each run: the later of its trainer's last step and its last declared pause's end, and
    how long after it a trainer may take no step (``no_progress_expr``), both by ``run``."""
    progress = _progress()
    step_allow = (f"clamp_min(({t.no_progress_step_multiple:g} * {_step_interval()} > 0) or (0 * {progress}), "
                  f"{t.no_progress_floor_seconds:g})")
    return progress, f"({step_allow} + {_pause_allowance(t)})"


def no_progress_expr(t: AlertThresholds) -> str:
    """The trainer of a run is up and has taken no optimiser step for over ``step_multiple`` times its step interval
    (and ``floor_seconds``), counted from its last step or from the end of its last pause, whichever is later; while a
    pause is under way (a held-out evaluation, a checkpoint save, a drain: ``PAUSE_PHASES``, which the trainer declares
    with ``probes.phase``), the allowance grows by ``pause_multiple`` times the mean length of the slowest kind of
    pause over the last 6 hours (completed pauses only, so a hung one does not stretch its own yardstick; any kind's,
    so a run's first drain is measured by its evaluations), and at least ``pause_floor_seconds`` (a run's first
    pause has no history). The value is the time since the last step; gated on the trainer's target being up
    (``running``). ``bench/no_progress_pauses.py`` evaluates it on real runs."""
    # (the trainer's series carry the alert's labels and value)
    return running(f"(time() - {_LAST_STEP}) and on (run) {_past_allowance(t)}")


def _past_allowance(t: AlertThresholds) -> str:
    """By ``run``: longer since its progress than its allowance (``_run_allowance``)."""
    progress, allowance = _run_allowance(t)
    return f"((time() - {progress}) > {allowance})"


def stalled(t: AlertThresholds) -> str:
    """The no-progress condition of each run, by ``run``, as ``RlobsNoProgress`` reads it (``no_progress_expr``, by
    run): its trainer has taken a step, and none for longer than the run's allowance (``_run_allowance``) after its
    last step or declared pause's end. Before the first step it does not hold: the evaluation before training ends a
    pause, and the first rollout after it may take minutes. The stepping gate candidate of ``precursor_rules`` and
    ``bench/early_warning_live.py`` (which reads it back from Prometheus) use it."""
    stepped = agg("max", series("rlobs_train_step_last_timestamp_seconds", ALERT), ("run",))
    return f"({_past_allowance(t)} and on (run) {stepped})"


def heartbeat_lost_expr(t: AlertThresholds) -> str:
    """A process of a run has sent no heartbeat for over ``heartbeat_silence_seconds`` and over its run's no-progress
    allowance (``_run_allowance``: 5 step intervals, plus the pause allowance while a declared pause is under way),
    while it still answers scrapes. trainer_ref's processes beat once a step or more often, so a trainer whose steps
    take minutes (or a grader idle through a long evaluation) is not silent for long by its own run's measure; a run
    that reports no steps gets the plain floor. The value is the silence."""
    last_beat = agg("max", f"max_over_time({series(_HB, ALERT)}[15m])", _PROC)
    allow = (f"clamp_min(({_run_allowance(t)[1]}) or (0 * {agg('max', last_beat, ('run',))}), "
             f"{t.heartbeat_silence_seconds:g})")
    return running(f"(time() - {last_beat}) > on (run) group_left () {allow}", _PROC)


def _grader_p95(histogram: str, window: str = "5m", offset: str = "") -> str:
    inner = agg("sum", _rate(histogram + "_bucket", ALERT.with_window(window), offset), ("le", *GROUP, "grader_kind"))
    return f"histogram_quantile(0.95, {inner})"


RULES: tuple[AlertRule, ...] = (
    AlertRule(
        "process-down", "critical", f"{up(ALERT, run=('!=', ''))} == 0", T.process_down_for,
        "{{ $labels.component }} rank {{ $labels.rank }} stopped answering ({{ $labels.run }})",
        "The {{ $labels.component }} process (rank {{ $labels.rank }}, {{ $labels.instance }}) of run "
        "{{ $labels.run }} has not answered a scrape for over " + T.process_down_for + ": it died (SIGKILL, OOM, "
        "a lost node), is stopped (SIGSTOP, a debugger) or hangs. A process that ends cleanly removes its "
        "target; a dead one's target is removed about 2 minutes after it last beat, so a restarted actor "
        "clears this alert (the incident alert says it was restarted).",
        PromtoolCase((("up", {}, "1x5 0x14"),), "0",
                     labels={"rank": "0", "instance": "127.0.0.1:9101", "job": "rlobs"},
                     not_yet_min=6, firing_min=7, component="grader", up=False)),
    AlertRule(
        "no-progress", "critical",
        no_progress_expr(T), "0m",
        "No optimiser step for {{ $value | humanizeDuration }} ({{ $labels.run }})",
        "{{ $labels.component }} of run {{ $labels.run }} is up but has taken no optimiser step for "
        "{{ $value | humanizeDuration }}, over " + f"{T.no_progress_step_multiple:g}" + "x its step interval "
        f"(step plus data wait, last hour; at least {T.no_progress_floor_seconds:g} s) since its last step or "
        f"declared pause (evaluation, checkpoint, drain; during one, {T.no_progress_pause_multiple:g}x the mean "
        f"pause more, at least {T.no_progress_pause_floor_seconds:g} s). Suspect (a process that "
        "does not answer, else the one whose heartbeat is oldest): " + _SUSPECT + ".",
        PromtoolCase((("rlobs_train_step_last_timestamp_seconds", {}, "0+60x5 300x14"),
                      ("rlobs_train_steps_total", {}, "0+60x5 300x14"),
                      ("rlobs_trainer_step_seconds_total", {}, "0+30x5 150x14"),
                      ("rlobs_trainer_data_wait_seconds_total", {}, "0+30x5 150x14"),
                      (_HB, {"phase": "train"}, "0+60x5 300x14"),
                      (_HB, {"phase": "generate"}, "0+60x4 240x15")),
                     "2m 0s", not_yet_min=6, firing_min=7, query_text="trainer")),
    AlertRule(
        "heartbeat-lost", "critical",
        heartbeat_lost_expr(T), "1m",
        "{{ $labels.component }} rank {{ $labels.rank }} stopped sending heartbeats ({{ $labels.run }})",
        "No heartbeat from {{ $labels.component }} rank {{ $labels.rank }} ({{ $labels.instance }}) of run "
        "{{ $labels.run }} for {{ $value | humanizeDuration }} (over " + f"{T.heartbeat_silence_seconds:g}" + " s and "
        "over the run's no-progress allowance: 5 step intervals, more during a declared pause), although the process "
        "still answers scrapes: its main loop is stuck in phase " + _LAST_PHASE + " or waits on another process.",
        PromtoolCase(((_HB, {"phase": "train"}, "0+60x5"),), "4m 0s",
                     labels={"rank": "0", "instance": "127.0.0.1:9101"}, not_yet_min=7, firing_min=9,
                     query_text="train")),
    AlertRule(
        "incident-declared", "warning",
        running(_counter_alert("rlobs_incidents_total", (*GROUP, "fault"))), "0m",
        "Incident in run {{ $labels.run }}: {{ $labels.fault }}",
        "{{ $labels.component }} of run {{ $labels.run }} declared {{ $value | humanize }} incident(s) "
        "{{ $labels.fault }} in the last 10 minutes: an actor restarted after a death (actor_restart:*), a "
        "resume from a checkpoint, or an injected fault. Check the restarted process and the ledger.",
        PromtoolCase((("rlobs_incidents_total", {"fault": "actor_restart:grader"}, _BORN),), "1",
                     labels={"fault": "actor_restart:grader"}, not_yet_min=5, firing_min=6, component="driver")),
    AlertRule(
        "staleness-over-bound", "warning",
        # the staleness the run's bound is checked on: from the group's newest token version where the run says so
        # (trainer_ref --staleness-basis completion: a resumed group keeps older first tokens by design), else from
        # dispatch
        _gt(f"({agg('max', series('rlobs_staleness_bounded_max_versions', ALERT), GROUP)} or "
            f"{agg('max', series('rlobs_staleness_max_versions', ALERT), GROUP)})", T.staleness_max_versions), "2m",
        "Samples older than the staleness bound are being trained on ({{ $labels.run }})",
        "The last consumed batch of {{ $labels.component }} in run {{ $labels.run }} had samples "
        f"{{{{ $value | humanize }}}} policy versions old (bound {T.staleness_max_versions}; counted on the basis the "
        "run's bound is checked on). Either the max-staleness filter is off or the generator runs far ahead of the "
        "trainer.",
        PromtoolCase((("rlobs_staleness_max_versions", {}, "1x5 12x14"),), "12", not_yet_min=7, firing_min=8)),
    AlertRule(
        "weight-sync-boundary-failed", "critical",
        running(_counter_alert("rlobs_weight_sync_boundaries_total", (*GROUP, "boundary", "outcome"),
                               outcome=("=~", "error|torn"))),
        "0m",
        "Weight sync failed at the {{ $labels.boundary }} boundary ({{ $labels.run }})",
        "{{ $value | humanize }} weight-sync span(s) at boundary {{ $labels.boundary }} ended with outcome "
        "{{ $labels.outcome }} in the last 10 minutes ({{ $labels.component }}, run {{ $labels.run }}). "
        "The generator may serve a stale or partial policy.",
        PromtoolCase((("rlobs_weight_sync_boundaries_total", {"boundary": "staging", "outcome": "torn"}, _BORN),
                      ("rlobs_weight_sync_boundaries_total", {"boundary": "staging", "outcome": "ok"}, "0+1x19")),
                     "1", labels={"boundary": "staging", "outcome": "torn"}, not_yet_min=5, firing_min=6,
                     component="generator")),
    AlertRule(
        "weight-sync-fingerprint-mismatch", "critical",
        running(_counter_alert("rlobs_weight_sync_fingerprint_mismatches_total")), "0m",
        "Generator loaded weights that differ from the trainer's ({{ $labels.run }})",
        "{{ $value | humanize }} weight load(s) in {{ $labels.component }} produced fingerprints different from "
        "the trainer's dump in the last 10 minutes (run {{ $labels.run }}): the generator samples from a "
        "policy nobody trained.",
        PromtoolCase((("rlobs_weight_sync_fingerprint_mismatches_total", {}, _BORN),), "1",
                     not_yet_min=5, firing_min=6, component="generator")),
    AlertRule(
        "weight-sync-cache-not-reset", "critical",
        running(_counter_alert("rlobs_weight_sync_cache_reset_unconfirmed_total")), "0m",
        "KV/prefix cache not confirmed reset after a weight sync ({{ $labels.run }})",
        "{{ $value | humanize }} sync(s) in {{ $labels.component }} (run {{ $labels.run }}) finished without the "
        "engine confirming the KV/prefix-cache reset: cached keys/values from the old policy can leak into new "
        "rollouts.",
        PromtoolCase((("rlobs_weight_sync_cache_reset_unconfirmed_total", {}, _BORN),), "1",
                     not_yet_min=5, firing_min=6, component="generator")),
    AlertRule(
        "weight-sync-slow", "warning",
        running(_gt(histogram_mean("rlobs_weight_sync_boundary_seconds", _W10, (*GROUP, "boundary")),
                    T.sync_boundary_mean_seconds)), "5m",
        "Weight sync boundary {{ $labels.boundary }} is slow ({{ $labels.run }})",
        "The {{ $labels.boundary }} boundary took {{ $value | humanizeDuration }} on average over 10 minutes "
        f"in {{{{ $labels.component }}}} (run {{{{ $labels.run }}}}), over {T.sync_boundary_mean_seconds:g} s. "
        "Policy lag and staleness grow with it.",
        PromtoolCase((("rlobs_weight_sync_boundary_seconds_sum", {"boundary": "transfer"}, "0+45x19"),
                      ("rlobs_weight_sync_boundary_seconds_count", {"boundary": "transfer"}, "0+1x19")),
                     "45s", labels={"boundary": "transfer"}, not_yet_min=5, firing_min=6, component="generator")),
    AlertRule(
        "grad-norm-nonfinite", "critical",
        running(_counter_alert("rlobs_grad_norm_nonfinite_total")), "0m",
        "NaN/Inf gradient norm ({{ $labels.run }})",
        "{{ $value | humanize }} optimiser step(s) in {{ $labels.component }} (run {{ $labels.run }}) had a "
        "non-finite gradient norm in the last 10 minutes. Check the advantage denominator before the model.",
        PromtoolCase((("rlobs_grad_norm_nonfinite_total", {}, _BORN),), "1", not_yet_min=5, firing_min=6)),
    AlertRule(
        "grad-norm-spike", "info",
        running(_counter_alert("rlobs_grad_norm_spikes_total")), "0m",
        "Gradient-norm spike ({{ $labels.run }})",
        "The grad-norm spike detector fired {{ $value | humanize }} time(s) in {{ $labels.component }} (run "
        "{{ $labels.run }}) in the last 10 minutes. Check the advantage denominator before blaming the model.",
        PromtoolCase((("rlobs_grad_norm_spikes_total", {}, _BORN),), "1", not_yet_min=5, firing_min=6)),
    AlertRule(
        "advantage-denominator-collapse", "critical",
        running(f"{_gt(agg('max', series('rlobs_advantage_abs_max', ALERT), GROUP), T.advantage_abs_max)} or "
                f"{_counter_alert('rlobs_advantage_nonfinite_denominators_total')}"), "1m",
        "Advantage denominator collapsed ({{ $labels.run }})",
        "Max |advantage| (or the count of NaN/zero denominators) reached {{ $value | humanize }} in "
        f"{{{{ $labels.component }}}} (run {{{{ $labels.run }}}}); healthy GRPO advantages stay under "
        f"{T.advantage_abs_max:g}. Groups with a near-zero reward std are amplifying their advantages.",
        PromtoolCase((("rlobs_advantage_abs_max", {}, "2x5 50x14"),), "50", not_yet_min=6, firing_min=7)),
    AlertRule(
        "advantage-rank-disagreement", "critical",
        running(_counter_alert("rlobs_advantage_rank_disagreements_total")), "0m",
        "Data-parallel ranks disagree on the loss denominator ({{ $labels.run }})",
        "{{ $value | humanize }} step(s) in {{ $labels.component }} (run {{ $labels.run }}) where data-parallel "
        "ranks divided the loss by different token counts: gradients are mis-scaled per rank.",
        PromtoolCase((("rlobs_advantage_rank_disagreements_total", {}, _BORN),), "1",
                     not_yet_min=5, firing_min=6)),
    AlertRule(
        "advantage-zero-std-groups", "warning",
        running(_gt(agg("max", f"avg_over_time({series('rlobs_advantage_zero_std_groups_ratio', ALERT)}[10m])",
                        GROUP), T.zero_std_groups_ratio) + f" unless on (run) {_task_solved('10m')}"),
        "5m",
        "Most GRPO groups carry no learning signal ({{ $labels.run }})",
        "On average {{ $value | humanizePercentage }} of the groups of {{ $labels.component }} (run "
        "{{ $labels.run }}) had identical rewards (std 0) over 10 minutes, so their advantages are zero "
        f"(alert at {T.zero_std_groups_ratio:.0%}; quiet while the task is solved: a training reward of "
        f"{T.solved_reward:g}+ over 10 minutes matched by held-out success).",
        PromtoolCase((("rlobs_advantage_zero_std_groups_ratio", {}, "0.1x5 0.9x14"),), "90%",
                     not_yet_min=10, firing_min=20)),
    AlertRule(
        "grader-timeouts", "warning",
        running(_gt(f"{agg('sum', rate('rlobs_grader_calls_total', ALERT, outcome='timeout'), (*GROUP, 'grader_kind'))}"
                    f" / {agg('sum', rate('rlobs_grader_calls_total', ALERT), (*GROUP, 'grader_kind'))}",
                    T.grader_timeout_ratio)), "2m",
        "Grader {{ $labels.grader_kind }} is timing out ({{ $labels.run }})",
        "{{ $value | humanizePercentage }} of {{ $labels.grader_kind }} grader calls timed out over 5 minutes in "
        "{{ $labels.component }} (run {{ $labels.run }}). Timed-out samples are dropped or get no reward.",
        PromtoolCase((("rlobs_grader_calls_total", {"grader_kind": "code", "outcome": "ok"}, "0+9x19"),
                      ("rlobs_grader_calls_total", {"grader_kind": "code", "outcome": "timeout"}, "0+1x19")),
                     "10%", labels={"grader_kind": "code"}, not_yet_min=2, firing_min=3, component="grader")),
    AlertRule(
        "grader-slow", "warning",
        running(f"({_grader_p95('rlobs_grader_latency_seconds')} > {T.grader_slow_ratio:g} * "
                f"{_grader_p95('rlobs_grader_latency_seconds', '1h', '5m')}) and "
                f"{_grader_p95('rlobs_grader_latency_seconds')} > {T.grader_slow_min_seconds:g}"), "2m",
        "Grader {{ $labels.grader_kind }} slowed down ({{ $labels.run }})",
        "The p95 latency of {{ $labels.grader_kind }} grader calls in {{ $labels.component }} (run {{ $labels.run }}) "
        "is {{ $value | humanizeDuration }} over 5 minutes, over " + f"{T.grader_slow_ratio:g}" + "x its p95 of "
        "the hour before (the doctor's grader-slow rule uses the same ratio). Rewards arrive late and the "
        "trainer waits for data.",
        PromtoolCase((("rlobs_grader_latency_seconds_bucket", {"grader_kind": "code", "le": "0.1"}, "0+20x9 180x10"),
                      ("rlobs_grader_latency_seconds_bucket", {"grader_kind": "code", "le": "1"}, "0+20x19"),
                      ("rlobs_grader_latency_seconds_bucket", {"grader_kind": "code", "le": "+Inf"}, "0+20x19")),
                     "943.8ms", labels={"grader_kind": "code"}, not_yet_min=10, firing_min=13, component="grader")),
    AlertRule(
        "grader-backlog", "warning",
        running(f"({_grader_p95('rlobs_grader_queue_wait_seconds')} > {T.grader_backlog_ratio:g} * "
                f"{_grader_p95('rlobs_grader_latency_seconds')}) and "
                f"{_grader_p95('rlobs_grader_queue_wait_seconds')} > {T.grader_backlog_min_seconds:g}"), "1m",
        "Grader {{ $labels.grader_kind }} calls wait in a saturated queue ({{ $labels.run }})",
        "{{ $labels.grader_kind }} grader calls in {{ $labels.component }} (run {{ $labels.run }}) waited "
        "{{ $value | humanizeDuration }} (p95 over 5 minutes) in the queue, longer than " +
        (f"{T.grader_backlog_ratio:g}x " if T.grader_backlog_ratio != 1 else "") +
        "the calls themselves take: the grader pool is saturated and the trainer waits for rewards.",
        PromtoolCase((("rlobs_grader_queue_wait_seconds_bucket", {"grader_kind": "code", "le": "1"}, "0+20x4 80x15"),
                      ("rlobs_grader_queue_wait_seconds_bucket", {"grader_kind": "code", "le": "30"}, "0+20x19"),
                      ("rlobs_grader_queue_wait_seconds_bucket", {"grader_kind": "code", "le": "+Inf"}, "0+20x19"),
                      ("rlobs_grader_latency_seconds_bucket", {"grader_kind": "code", "le": "2"}, "0+20x19"),
                      ("rlobs_grader_latency_seconds_bucket", {"grader_kind": "code", "le": "+Inf"}, "0+20x19")),
                     "27.58s", labels={"grader_kind": "code"}, not_yet_min=4, firing_min=7, component="grader")),
    AlertRule(
        "grader-hung", "critical",
        _gt(agg("max", series("rlobs_grader_overdue_calls", ALERT), (*GROUP, "grader_kind")), 0), "2m",
        "Grader {{ $labels.grader_kind }} has calls stuck past their deadline ({{ $labels.run }})",
        "{{ $value | humanize }} {{ $labels.grader_kind }} grader call(s) in {{ $labels.component }} (run "
        "{{ $labels.run }}) are still in flight past their deadline. A hung grader looks like a deadlock "
        "elsewhere.",
        PromtoolCase((("rlobs_grader_overdue_calls", {"grader_kind": "judge"}, "0x5 3x14"),), "3",
                     labels={"grader_kind": "judge"}, not_yet_min=7, firing_min=8, component="grader")),
    AlertRule(
        "trainer-starved", "warning",
        running(f"({_gt(trainer_wait_share(ALERT, GROUP), T.trainer_data_wait_ratio)}) and "
                f"({trainer_wait_share(ALERT, GROUP)} > {T.trainer_data_wait_vs_baseline:g} * "
                f"{trainer_wait_share(ALERT.with_window('1h'), GROUP, offset='10m')})"), "5m",
        "Trainer is waiting for data ({{ $labels.run }})",
        "{{ $labels.component }} spent {{ $value | humanizePercentage }} of its time over the last 5 minutes "
        f"waiting for batches instead of stepping, over {T.trainer_data_wait_vs_baseline:g}x its share of the hour "
        "before (run {{ $labels.run }}): generation, grading or weight sync cannot keep up any more. The "
        "Graders and Weight sync boards say which.",
        PromtoolCase((("rlobs_trainer_data_wait_seconds_total", {}, "0+20x14 280+48x15"),
                      ("rlobs_trainer_step_seconds_total", {}, "0+40x14 560+12x15")), "80%",
                     not_yet_min=16, firing_min=25)),
    AlertRule(
        "parity-drift", "warning",
        _gt(agg("max", series("rlobs_parity_abs_logprob_diff_mean", ALERT), GROUP), T.parity_mean_abs_dlogp),
        "2m",
        "Trainer and generator log-probs disagree ({{ $labels.run }})",
        "Mean |logp_train - logp_gen| is {{ $value | printf \"%.4f\" }} in {{ $labels.component }} (run "
        f"{{{{ $labels.run }}}}); healthy is < 0.005, > {T.parity_mean_abs_dlogp:g} is a problem. A jump "
        "right after a sync points at weight sync or the cache; a slow rise at staleness or precision.",
        PromtoolCase((("rlobs_parity_abs_logprob_diff_mean", {}, "0.002x5 0.05x14"),), "0.0500",
                     not_yet_min=7, firing_min=8)),
    AlertRule(
        "parity-config-mismatch", "critical",
        running(_counter_alert("rlobs_parity_config_mismatches_total")), "0m",
        "Tokenizer / chat template / sampling parameters differ between generator and trainer ({{ $labels.run }})",
        "{{ $value | humanize }} batch(es) in {{ $labels.component }} (run {{ $labels.run }}) were generated with "
        "tokenizer, chat-template or sampling hashes different from the trainer's.",
        PromtoolCase((("rlobs_parity_config_mismatches_total", {}, _BORN),), "1", not_yet_min=5, firing_min=6)),
    AlertRule(
        "ledger-samples-repeated", "critical",
        running(_counter_alert("rlobs_ledger_duplicate_transitions_total", (*GROUP, "state"))), "0m",
        "Samples went through the same ledger transition twice ({{ $labels.run }})",
        "{{ $value | humanize }} sample(s) were {{ $labels.state }} again in {{ $labels.component }} (run "
        "{{ $labels.run }}) over 10 minutes: exactly-once is violated, typically by a resume that replays samples.",
        PromtoolCase((("rlobs_ledger_duplicate_transitions_total", {"state": "consumed"}, _BORN),), "1",
                     labels={"state": "consumed"}, not_yet_min=5, firing_min=6, component="buffer")),
    AlertRule(
        "telemetry-drops", "warning",
        running(_counter_alert("rlobs_telemetry_dropped_total", (*GROUP, "reason"))), "2m",
        "rlobs is dropping telemetry events ({{ $labels.run }})",
        "{{ $value | humanize }} telemetry event(s) were dropped for reason {{ $labels.reason }} in "
        "{{ $labels.component }} (run {{ $labels.run }}) over 10 minutes. Dashboards, alerts and the doctor see "
        "an incomplete run.",
        PromtoolCase((("rlobs_telemetry_dropped_total", {"reason": "queue_full", "sink": "runstore"}, "_x6 7x13"),),
                     "7", labels={"reason": "queue_full"}, not_yet_min=7, firing_min=8)),
    # the doctor's own precursor findings, served by `rlobs doctor RUN --follow --metrics-port N`
    # (rlobs.doctor.exporter): the doctor counts steps, so this alert needs no step time, and it is the doctor (no
    # PromQL re-derivation). It holds while a process of the run other than the doctor is up: a run that ended
    # cleanly (its targets gone) pages nobody, and the doctor's target lingers until its next evaluation sees the end
    AlertRule(
        "doctor-precursor", "warning",
        f"({agg('max', series('rlobs_doctor_finding', ALERT, rule=('=~', 'precursor-.*')), (*GROUP, 'rule'))} > 0)"
        + _RUN_UP, "0m",
        "Early warning from the doctor: {{ $labels.rule }} ({{ $labels.run }})",
        "`rlobs doctor --follow`, judging run {{ $labels.run }} as its record grows, reports {{ $labels.rule }} "
        "since step " + _DOCTOR_ONSET + ": a precursor of a collapse (the rule's runbook "
        "runbooks/{{ $labels.rule }}.md names the coming failure, the expected steps to impact and the action). "
        "The doctor counts optimiser steps, so this alert holds at any step time; run `rlobs doctor RUN` for the "
        "finding's evidence.",
        PromtoolCase((("rlobs_doctor_finding", {"rule": "precursor-kl-creep", "severity": "warning"}, _BORN),
                      ("rlobs_doctor_finding_first_step", {"rule": "precursor-kl-creep", "severity": "warning"},
                       "_x6 17x13")),
                     "1", labels={"rule": "precursor-kl-creep"}, not_yet_min=5, firing_min=6, component="doctor",
                     query_text="17", up_component="trainer")),
    # the watcher behind RlobsDoctorPrecursor: its last evaluation too long ago while the run is up (an evaluation that
    # hangs, a watcher stuck, a record it cannot read: the exporter keeps serving the last verdict, up == 1); a doctor
    # that has not judged the run once counts from its start (no last-evaluation series yet)
    AlertRule(
        "doctor-behind", "warning",
        f"((time() - ({agg('max', series('rlobs_doctor_last_evaluation_timestamp_seconds', ALERT), GROUP)} or "
        f"{agg('max', series('rlobs_doctor_started_timestamp_seconds', ALERT), GROUP)})) > "
        f"clamp_min({T.doctor_behind_interval_multiple:g} * "
        f"{agg('max', series('rlobs_doctor_interval_seconds', ALERT), GROUP)}, {T.doctor_behind_min_seconds:g}))"
        + _RUN_UP, "1m",
        "The doctor watching run {{ $labels.run }} has not judged it for {{ $value | humanizeDuration }}",
        "The doctor's last evaluation of run {{ $labels.run }} ended {{ $value | humanizeDuration }} ago (or it has "
        "not judged the run once since it started that long ago), over "
        f"{T.doctor_behind_interval_multiple:g}x its interval (at least {T.doctor_behind_min_seconds:g} s), while the "
        "run is up: an evaluation hangs, the watcher is stuck, or the record cannot be read (rlobs_doctor_evaluations_total"
        "{outcome=\"error\"}). Until it judges again RlobsDoctorPrecursor cannot fire: the early warning is blind.",
        PromtoolCase((("rlobs_doctor_last_evaluation_timestamp_seconds", {}, "0+60x5 300x14"),
                      ("rlobs_doctor_started_timestamp_seconds", {}, "0x19"),
                      ("rlobs_doctor_interval_seconds", {}, "10x19")),
                     "7m 0s", not_yet_min=9, firing_min=12, component="doctor", up_component="trainer")),
)



# ---------- early warning (issue 18): precursors of a collapse, live ----------
# The doctor's precursor rules (rlobs.doctor.rules.precursors) judge a run's steps against its own early steps
# with a CUSUM; live, the same notion on the last ``recent`` minutes vs the ``history`` before them: the median
# of the window moved by the failure table's ``min_effect`` (a median: one odd batch is not a trend), with the
# same learning guards (entropy and zero-std shares fall / rise in a run that learns: silent while the reward
# climbs by ``learning_gain``, and for zero-std groups while the reward is above ``solved_reward``).
PRECURSOR_WINDOWS = {"recent": "10m", "history": "1h"}
# (at PRECURSOR_STEP_SECONDS a step: 5 and 30 steps)
_UNITS = (("h", 3600), ("m", 60), ("s", 1))


def duration_seconds(d: str) -> float:
    """A Prometheus duration of one unit (``500ms``, ``30s``, ``10m``, ``1h``) in seconds."""
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", d)
    if m is None:
        raise ValueError(f"{d!r} is not a single duration of one unit (500ms, 30s, 10m, 1h)")
    return int(m[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m[2]]


def scaled_duration(d: str, step_seconds: float) -> str:
    """``d``, a window or ``for`` of the committed precursor rules, for steps of ``step_seconds``: the same number of
    steps (``10m`` at 300 s a step: ``25m``), in the largest whole unit, whole seconds at least."""
    if step_seconds <= 0:
        raise ValueError(f"step seconds must be positive, not {step_seconds:g}")
    return _duration(max(1, round(duration_seconds(d) * step_seconds / PRECURSOR_STEP_SECONDS)))


def rules_step_seconds(step_seconds: float) -> int:
    """A run's step time as the precursor rules are built for it: whole even seconds (every scaled window, ``for``
    and promtool case minute a whole second), 2 s to a day."""
    if not 1 <= step_seconds <= 86_400:
        raise ValueError(f"a step time of {step_seconds:g} s: give the run's optimiser step time in seconds, 1 to 86400")
    return max(2, 2 * round(step_seconds / 2))


def _duration(seconds: float) -> str:
    """``seconds`` as a Prometheus duration of one unit, the largest whole one (``20m``; ``10500ms`` where not whole
    seconds, as a replay's scaled windows are)."""
    ms = round(seconds * 1000)
    if ms % 1000:
        return f"{ms}ms"
    return next(f"{ms // 1000 // n}{u}" for u, n in _UNITS if ms // 1000 % n == 0)


def precursor_windows(step_seconds: float = PRECURSOR_STEP_SECONDS) -> dict[str, str]:
    """The precursor alerts' ``recent`` and ``history`` windows for steps of ``step_seconds``."""
    return {k: scaled_duration(v, step_seconds) for k, v in PRECURSOR_WINDOWS.items()}


def _over_time(fn: str, name: str, window: str, offset: str | None = None, q: float | None = None) -> str:
    """``max by (run, component) (fn([q, ]name[window] [offset ...]))``: one per-run reading of a precursor signal."""
    lead = f"{q:g}, " if q is not None else ""
    tail = f" offset {offset}" if offset else ""
    return agg("max", f"{fn}({lead}{series(name, ALERT)}[{window}]{tail})", GROUP)


def _median_now(name: str, recent: str) -> str:
    return _over_time("quantile_over_time", name, recent, q=0.5)


def _median_before(name: str, recent: str, history: str) -> str:
    return _over_time("quantile_over_time", name, history, recent, q=0.5)


def _reference_steps(recent: str, history: str, baseline: float) -> str:
    """The window before the recent one holds ``baseline`` steps' readings, as the doctor's drift detectors judge a
    run only once it has ``baseline`` reference steps before their lag (rlobs.doctor.rules.precursors.judge). Counted
    as changes of the step counter (each of its values is one step's reading of the per-step gauges; a restart's
    reset is a change too), not as the signal's own changes (a share that holds at 0 changes at no step) nor as
    samples (scrapes, not steps)."""
    return f"({_over_time('changes', 'rlobs_train_steps_total', history, recent)} >= {baseline - 1:g})"


def _reward_not_climbing(recent: str, history: str, gain: float) -> str:
    now = _over_time("avg_over_time", "rlobs_reward_mean", recent)
    before = _over_time("avg_over_time", "rlobs_reward_mean", history, recent)
    return f"({now} < {before} + {gain:g})"


def _reward_under(recent: str, level: float) -> str:
    """The training reward's mean over the recent window under ``level`` (the solved guards: a solved task's policy
    sharpens and its groups turn zero-std as it converges)."""
    return f"({_over_time('avg_over_time', 'rlobs_reward_mean', recent)} < {level:g})"


def oversized_learned(recent: str, o: Mapping[str, float]) -> tuple[str, str]:
    """RlobsPrecursorOversizedUpdates' "the run has learned" legs (``o``: its thresholds): the training reward's mean
    over the ``recent`` window ``reward_gain`` over its early level (the exporter's rlobs_reward_baseline), and
    held-out success ``heldout_gain`` over its first evaluation. Since the fifty-seventh early-warning run as the
    doctor reads held-out success, through exporter gauges (the alert cannot index a series by evaluation): the
    training reward's climb counts only where held-out success, once evaluated twice, has gained
    ``reward_heldout_floor`` at its best evaluation after the first (healthy-tiny-s300 paged at 8 on a reward +0.15
    with held-out success never over its first evaluation), and held-out success's own gain is the mean of its last
    ``heldout_recent`` evaluations after the first (s290 paged at 37 on the best of its last 10 minutes, +0.18; the
    mean of its last two +0.149). Held-out success comes from the driver: matched on the run."""
    flat = (f"({agg('max', series('rlobs_heldout_success_best', ALERT), (GROUP[0],))} - "
            f"{agg('max', series('rlobs_heldout_success_baseline', ALERT), (GROUP[0],))} < "
            f"{o['reward_heldout_floor']:g})")
    reward = (f"(({_over_time('avg_over_time', 'rlobs_reward_mean', recent)} >= "
              f"{agg('max', series('rlobs_reward_baseline', ALERT), GROUP)} + {o['reward_gain']:g})"
              f" unless on ({GROUP[0]}) {flat})")
    heldout = (f"({agg('max', series('rlobs_heldout_success_recent', ALERT), GROUP)} >= "
               f"{agg('max', series('rlobs_heldout_success_baseline', ALERT), GROUP)} + {o['heldout_gain']:g})")
    return reward, heldout


def reward_hacking_heldout(recent: str, history: str, h: Mapping[str, float], readings: int = 2) -> str:
    """The reward-hacking alert's held-out leg: the training reward's mean over the ``recent`` window above its early
    level (the low decile of the ``history`` window before) by ``reward_gain``, and the last held-out evaluation
    above the lowest of that window by at most ``heldout_share`` of the gain. Held-out success comes from the driver,
    not the trainer: one reading per run, matched to the trainer's series on the run (group_left keeps the trainer's
    labels). ``readings``: the doctor asks it at two held-out evaluations running; here it must hold now and
    ``readings - 1`` ``recent`` windows before (every selector shifted by one: at an evaluation every 5 steps, two
    evaluations). With one reading (the rule until the forty-second early-warning run) it paged 7 of 127 healthy
    runs replayed live while stepping: a reward that climbs a step or two ahead of the next evaluation."""
    def at(i: int) -> str:  # the condition i `recent` windows ago
        shift = _duration(i * duration_seconds(recent)) if i else None
        back = _duration((i + 1) * duration_seconds(recent)) if i else recent
        reward_gain = (f"({_over_time('avg_over_time', 'rlobs_reward_mean', recent, shift)} - "
                       f"{_over_time('quantile_over_time', 'rlobs_reward_mean', history, back, q=0.1)})")
        heldout_gain = (f"max by ({GROUP[0]}) ({_over_time('last_over_time', 'rlobs_heldout_success', recent, shift)}"
                        f" - {_over_time('min_over_time', 'rlobs_heldout_success', history, back)})")
        return (f"({reward_gain} >= {h['reward_gain']:g}) and "
                f"({reward_gain} - on ({GROUP[0]}) group_left {heldout_gain} / {h['heldout_share']:.6g} >= 0)")

    return f" and on ({', '.join(GROUP)}) ".join(f"({at(i)})" for i in range(readings))


def precursor_rules(recent: str | None = None, history: str | None = None,
                    gate: AlertThresholds | None = None,
                    step_seconds: float = PRECURSOR_STEP_SECONDS,
                    pause: AlertThresholds | None = None) -> tuple[AlertRule, ...]:
    """The eight precursor alerts. ``step_seconds``: the run's optimiser step time they are built for; the committed
    rules are built for PRECURSOR_STEP_SECONDS (windows of 10 min and 1 h: 5 and 30 steps), other step times scale
    every window and ``for`` to hold the same steps (``rlobs dashboards build --step-seconds``).
    ``recent``/``history``: explicit windows instead (a test that replays a recorded run faster scales them, and
    their ``for``).
    ``gate``: a candidate not committed, for ``bench/early_warning_live.py --gated``: the stepping gate with these
    no-progress thresholds (``stalled``; a replay scales its floors as it scales the windows). It missed its bar in
    the thirty-third early-warning run (README), so the committed rules do not have it; they have the softer
    fresh-data gate (``fresh_data``: the run progressed within the recent window). ``pause``: that gate's pause
    allowance thresholds (default: the committed ones; a replay scales the floor as it scales the windows)."""
    from rlobs.failures import failure

    def th(fid: str) -> Mapping[str, float]:
        return failure(fid).thresholds

    def f(fid: str) -> str:
        return str(failure(fid).alert_for)

    if step_seconds != PRECURSOR_STEP_SECONDS:
        step_seconds = rules_step_seconds(step_seconds)
    windows = precursor_windows(step_seconds)
    recent, history = recent or windows["recent"], history or windows["history"]

    on = f" and on ({', '.join(GROUP)}) "
    g, e, i, k, z = (th("precursor-grad-norm-drift"), th("precursor-entropy-decline"),
                     th("precursor-importance-truncation"), th("precursor-kl-creep"), th("precursor-zero-std-rising"))
    u, o = th("precursor-uncorrected-off-policy"), th("precursor-oversized-updates")
    h = th("precursor-reward-hacking")
    win = f"the last {recent} vs the {history} before"
    # the KL rule's rate (the doctor: since the run's first step): the rise of the recent median over the lowest
    # reading of the window before, per optimiser step taken over both windows (a run younger than them: since its
    # start, as the doctor reads it)
    kl_rise = (f"({_median_now('rlobs_reference_kl', recent)} - "
               f"{_over_time('min_over_time', 'rlobs_reference_kl', history, recent)})")
    steps_in_window = (f"({_over_time('increase', 'rlobs_train_steps_total', history, recent)} + "
                       f"{_over_time('increase', 'rlobs_train_steps_total', recent)})")
    on_run = f" and on ({GROUP[0]}) "  # held-out evaluations come from the driver, not the trainer component
    oversized = (f"({_over_time('quantile_over_time', 'rlobs_policy_update_kl', recent, q=1 - o['min_steps'] / o['window'])}"
                 f" > {o['kl_above']:g}){on}"
                 # the entropy against its early level, the median of the run's first steps (the doctor's e0; until
                 # the fifty-seventh early-warning run the highest reading of the hour before, which a noisy entropy
                 # sets high: healthy-tiny-s322 paged at 43 on 0.59 of it, 1.7x its first steps' level)
                 f"({_median_now('rlobs_policy_entropy', recent)} < {o['entropy_share_below']:g} * "
                 f"{agg('max', series('rlobs_policy_entropy_baseline', ALERT), GROUP)})"
                 # the quantile weighs scrapes, not updates: a gauge holds its last value when the trainer
                 # stops or stalls, and one large last update would fill the window. The window must hold
                 # min_steps updates (min_steps - 1 changes of the gauge), as the doctor's rule counts steps
                 f"{on}({_over_time('changes', 'rlobs_policy_update_kl', recent)} >= {o['min_steps'] - 1:g})")
    # the first-steps leg (the doctor's early_*): early_min_steps of early_window updates over early_kl_above (as a
    # share of the window's readings) while the trainer has taken at most early_steps optimiser steps (a process
    # restarted from a checkpoint counts again from 0: large steps right after a resume are as much the lr's size).
    # No learning or entropy guard. The updates are read over the `history` window (a run's first steps are all
    # inside it when a step takes under history / early_steps), which must hold early_min_steps of them; the gate
    # below holds from the warning step to early_steps, and `for` must fit in that: steps of ~20 s to ~5 min (a
    # faster or slower run gets the guarded branch only)
    # Or (the median leg, 3 Dec 2026) the median reading over early_median_above: a few small updates among very large
    # ones
    eq = 1 - o["early_min_steps"] / o["early_window"]
    early = (f"(({_over_time('quantile_over_time', 'rlobs_policy_update_kl', history, q=eq)}"
             f" > {o['early_kl_above']:g}) or "
             f"({_over_time('quantile_over_time', 'rlobs_policy_update_kl', history, q=0.5)}"
             f" > {o['early_median_above']:g})){on}"
             f"({_over_time('changes', 'rlobs_policy_update_kl', history)} >= {o['early_min_steps'] - 1:g}){on}"
             f"({_over_time('max_over_time', 'rlobs_train_steps_total', recent)} <= {o['early_steps']:g})")
    # a step without a gradient is not judged (the doctor's no_gradient_eps): while the trainer's last grad norm is at
    # most that (every group zero-std: a solved task), neither leg holds. Without the gate `make main MODEL=smollm2`
    # (a healthy run solving its task by step 5) paged at its step 5, the doctor's warning before 1f12930
    idle = f"({_over_time('last_over_time', 'rlobs_grad_norm', recent)} <= {o['no_gradient_eps']:g})"
    # the after-learning leg is silent on a solved policy (the doctor's solved_zero_std / solved_reward): most groups
    # all correct and the reward high over the recent window, the few groups left carry each update and Adam scales
    # their noise to an lr-sized step (healthy-t07-s214 warned at step 58, held 0.87-0.91 to step 100)
    # (parenthesised where used: `unless` and `and` bind alike, left to right, so `X unless A and B` is `(X unless A)
    # and B`, which held the leg to a reward of solved_reward: the live replay of the forty-first run lost four lr
    # warnings to it; the promtool case's reward of 0.5 below is what catches it)
    solved = (f"({_median_now('rlobs_advantage_zero_std_groups_ratio', recent)} >= {o['solved_zero_std']:g}){on}"
              f"({_median_now('rlobs_reward_mean', recent)} >= {o['solved_reward']:g})")
    # the run has learned (as the doctor asks): its training reward climbed over its early level (the median of its
    # first `baseline` steps, rlobs_reward_baseline), or its held-out success over its first evaluation
    # (rlobs_heldout_success_baseline); both served by the exporter, set once. Until the fifty-third early-warning run
    # the early levels were the hour before's low decile and lowest evaluation, where a noisy reward, or a held-out dip
    # and recovery, read as learning (healthy-tiny s228 and s231 paged, held-out success flat)
    reward_climbed, heldout_climbed = oversized_learned(recent, o)
    hacking = reward_hacking_heldout(recent, history, h)
    # the audit leg: the training reward's excess over an exact check on the same samples (the driver's gauge), its
    # mean over the recent window over audit_above and audit_gain above its low decile in the hour before
    audit_now = _over_time('avg_over_time', 'rlobs_grader_audit_gap', recent)
    audit = (f"({audit_now} >= {h['audit_above']:g}) and ({audit_now} - "
             f"{_over_time('quantile_over_time', 'rlobs_grader_audit_gap', history, recent, q=0.1)} >= {h['audit_gain']:g})")
    # the stepping gate, a candidate (thirty-third early-warning run, not landed): the signals are per step, and a
    # trainer that stops keeps serving its last values, which fill the windows (held values: the reward-hacking alert
    # paged after 5 of 36 runs' last steps in the twenty-seventh run, after healthy-ppo2 s126's in the thirty-third).
    # With the gate each alert holds only while its run is not stalled (RlobsNoProgress's condition, declared pauses
    # counted as progress). It removed those pages but the condition also held while staleness-no-is s56 stepped (one
    # step came 5.6x its run's mean step time after the one before), so it is not in the committed rules
    # where a doctor watches the run (`rlobs observe`, `rlobs doctor --follow --metrics-port`: its exporter serves
    # rlobs_doctor_started_timestamp_seconds while it runs) these re-derivations defer to RlobsDoctorPrecursor, the
    # doctor's own findings: one page per precursor, and none of this alert family's known healthy pages (the
    # reward-hacking alert paged 7 of 127 healthy runs replayed live, the doctor none of them); without a doctor
    # they page as before, and a doctor that stops serving hands back to them (RlobsDoctorBehind pages a stuck one)
    watching = agg("max", series("rlobs_doctor_started_timestamp_seconds", ALERT), (GROUP[0],))

    # the fresh-data gate (the forty-eighth and forty-ninth early-warning runs): each alert holds only while its run
    # has progressed within the recent window, or is in a declared pause within its allowance (fresh_data), so held
    # readings after a run's last step page nobody; softer than the candidate above: it shuts on no step nor declared
    # pause for a whole recent window (5 steps), not on one step slower than 5x the mean busy time
    fresh = fresh_data(recent, pause)

    # the uncorrected-off-policy alert's readings; its far leg's quantile is the far_min_below-th lowest of `window`
    # readings (one a step), 0.25 for 2 of 5
    ess, stale_now = "rlobs_effective_sample_size_ratio", _median_now("rlobs_staleness_mean_versions", recent)
    far_q = (u["far_min_below"] - 1) / (u["window"] - 1)

    def stepping(expr: str) -> str:
        expr = f"({expr}) and on ({GROUP[0]}) {fresh}"
        expr = expr if gate is None else f"({expr}) unless on ({GROUP[0]}) {stalled(gate)}"
        return running(f"({expr}) unless on ({GROUP[0]}) {watching}")

    out = (
        AlertRule(
            "precursor-grad-norm-drift", "warning",
            stepping(f"({_median_now('rlobs_grad_norm', recent)} > {1 + g['min_effect']:g} * "
                    f"{_median_before('rlobs_grad_norm', recent, history)}){on}"
                    f"{_reference_steps(recent, history, g['baseline'])}"), f("precursor-grad-norm-drift"),
            "Early warning: grad norm drifting up, divergence ahead ({{ $labels.run }})",
            "The median pre-clip grad norm of {{ $labels.component }} (run {{ $labels.run }}) is {{ $value | "
            f"humanize }}}} over {win}, over {1 + g['min_effect']:g}x its earlier median: updates grow step after "
            "step, the precursor of a divergence (reward break, entropy collapse). Lower the learning rate.",
            PromtoolCase((("rlobs_grad_norm", {}, "0.5x70 0.5+0.5x20"),), "6.5",
                         not_yet_min=70, firing_min=88)),
        AlertRule(
            "precursor-entropy-decline", "warning",
            stepping(f"({_median_now('rlobs_policy_entropy', recent)} < {1 - e['min_effect']:g} * "
                    f"{_median_before('rlobs_policy_entropy', recent, history)}){on}"
                    f"{_reward_not_climbing(recent, history, e['learning_gain'])}{on}"
                    f"{_reward_under(recent, e['solved_reward'])}{on}"
                    f"{_reference_steps(recent, history, e['baseline'])}"),
            f("precursor-entropy-decline"),
            "Early warning: entropy falling without learning, collapse ahead ({{ $labels.run }})",
            "The median policy entropy of {{ $labels.component }} (run {{ $labels.run }}) is {{ $value | humanize }} "
            f"over {win}, under {1 - e['min_effect']:g}x its earlier median, while the training reward is not "
            f"climbing (< +{e['learning_gain']:g}) nor over {e['solved_reward']:g} (a solved task's policy sharpens as it "
            "converges): the policy sharpens without learning, the precursor of an "
            "entropy collapse. Raise the temperature or add an entropy bonus; lower the learning rate.",
            PromtoolCase((("rlobs_policy_entropy", {}, "1x70 0.1x20"), ("rlobs_reward_mean", {}, "0.3x90")),
                         "100m", not_yet_min=70, firing_min=88)),
        AlertRule(
            "precursor-importance-truncation", "warning",
            stepping(f"({_median_now('rlobs_importance_clipped_ratio', recent)} > {1 + i['min_effect']:g} * "
                    f"{_median_before('rlobs_importance_clipped_ratio', recent, history)} + {i['min_abs']:g} "
                    f"and {_median_now('rlobs_importance_clipped_ratio', recent)} > {i['min_level']:g}){on}"
                    f"{_reference_steps(recent, history, i['baseline'])}"),
            f("precursor-importance-truncation"),
            "Early warning: more tokens need importance truncation, off-policy divergence ahead ({{ $labels.run }})",
            "The median share of tokens whose importance ratio was truncated in {{ $labels.component }} (run "
            "{{ $labels.run }}) is {{ $value | humanizePercentage }} over " + win + ", over "
            f"{1 + i['min_effect']:g}x its earlier median + {i['min_abs']:g} and over {i['min_level']:.0%}: generator "
            "and trainer policies drift "
            "apart (staleness), the precursor of an off-policy divergence. Tighten max staleness; keep IS truncation on.",
            PromtoolCase((("rlobs_importance_clipped_ratio", {}, "0.01x70 0.01+0.01x20"),), "13%",
                         not_yet_min=70, firing_min=88)),
        AlertRule(
            "precursor-kl-creep", "warning",
            stepping(f"({_median_now('rlobs_reference_kl', recent)} > {1 + k['min_effect']:g} * "
                    f"{_median_before('rlobs_reference_kl', recent, history)} + {k['min_abs']:g}){on}"
                    f"({kl_rise} >= {k['min_rate']:g} * {steps_in_window})"),
            f("precursor-kl-creep"),
            "Early warning: KL to the reference creeping up, blow-up ahead ({{ $labels.run }})",
            "The median KL to the reference of {{ $labels.component }} (run {{ $labels.run }}) is {{ $value | "
            f"humanize }}}} over {win}, over {1 + k['min_effect']:g}x its earlier median, and it rose faster than "
            f"{k['min_rate']:g} nats/token per optimiser step (a run that learns moves it slower): the KL penalty no "
            "longer holds the policy, the precursor of a KL blow-up. Raise kl_coef or lower the learning rate.",
            PromtoolCase((("rlobs_reference_kl", {}, "0.01x70 0.01+0.05x20"), ("rlobs_train_steps_total", {}, "0+0.2x90")),
                         "610m", not_yet_min=70, firing_min=88)),
        AlertRule(
            "precursor-zero-std-rising", "warning",
            stepping(f"({_median_now('rlobs_advantage_zero_std_groups_ratio', recent)} > {1 + z['min_effect']:g} * "
                    f"{_median_before('rlobs_advantage_zero_std_groups_ratio', recent, history)} + {z['min_abs']:g} "
                    f"and {_median_now('rlobs_advantage_zero_std_groups_ratio', recent)} > {z['min_level']:g})"
                    f"{on}{_reward_not_climbing(recent, history, z['learning_gain'])}{on}"
                    f"{_reward_under(recent, z['solved_reward'])}{on}"
                    f"{_reference_steps(recent, history, z['baseline'])}"), f("precursor-zero-std-rising"),
            "Early warning: more GRPO groups without signal while the reward is low ({{ $labels.run }})",
            "The median share of zero-std groups of {{ $labels.component }} (run {{ $labels.run }}) is {{ $value | "
            "humanizePercentage }} over " + win + f", over {1 + z['min_effect']:g}x its earlier median + "
            f"{z['min_abs']:g} and over {z['min_level']:.0%}, while the reward is neither climbing nor above {z['solved_reward']:g}: the policy "
            "collapses onto identical (wrong) answers and learning is about to stop. Raise the temperature or the "
            "group size; lower the learning rate.",
            PromtoolCase((("rlobs_advantage_zero_std_groups_ratio", {}, "0.1x70 0.9x20"),
                          ("rlobs_reward_mean", {}, "0.2x90")), "90%", not_yet_min=70, firing_min=88)),
        # a level, not a drift (like the doctor's rule): the ESS is already a ratio to "on-policy" (1.0); and the
        # doctor's far leg (the fiftieth and fifty-first early-warning runs): at a median staleness of far_staleness
        # versions, far_min_below of the window's steps under the bar, read as the quantile of the recent samples
        # that is the far_min_below-th lowest of window steps
        AlertRule(
            "precursor-uncorrected-off-policy", "warning",
            stepping(f"((({_median_now(ess, recent)} < {u['ess_below']:g}){on}"
                    f"({stale_now} >= {u['min_staleness']:g})) or "
                    f"(({_over_time('quantile_over_time', ess, recent, q=far_q)} < {u['ess_below']:g}){on}"
                    f"({stale_now} >= {u['far_staleness']:g}))){on}"
                    f"({_over_time('max_over_time', 'rlobs_importance_correction_cap', recent)}"
                    " == 0)"), f("precursor-uncorrected-off-policy"),
            "Early warning: stale samples trained on without importance correction, divergence ahead ({{ $labels.run }})",
            "The effective sample size of the importance ratios in {{ $labels.component }} (run {{ $labels.run }}) "
            "is {{ $value | humanizePercentage }} of the tokens over the last " + recent + f" (their median; at a "
            f"median staleness of {u['far_staleness']:g}+ versions a low quantile: {u['far_min_below']:g} of "
            f"{u['window']:g} steps under the bar suffice), under {u['ess_below']:.0%}, at a "
            f"median staleness of {u['min_staleness']:g}+ versions, and the loss applies no importance correction "
            "(cap 0): every update is biased towards the stale policies, the precursor of an off-policy divergence "
            f"(held-out success fell {u['impact_steps_low']:g}-{u['impact_steps_high']:g} steps later in the early-warning "
            "bench). Turn truncated IS on; tighten max staleness.",
            PromtoolCase((("rlobs_effective_sample_size_ratio", {}, "0.98x70 0.5x20"),
                          ("rlobs_staleness_mean_versions", {}, "2x90"),
                          ("rlobs_importance_correction_cap", {}, "0x90")), "50%", not_yet_min=70, firing_min=88)),
        # a level too: nats per token most updates move the policy (the low quantile: most of the recent samples over
        # the bar, as the doctor asks min_steps of window), on a policy whose entropy has narrowed (its
        # early level: the highest entropy of the hour before) after the reward has climbed (over the median of the
        # run's first steps, or held-out success over its first evaluation: the exporter's baselines), as the doctor's
        # rule compares with the run's first steps
        AlertRule(
            "precursor-oversized-updates", "warning",
            stepping(f"(((({oversized}{on}{reward_climbed}) or ({oversized}{on_run}{heldout_climbed}))"
                    f" unless on ({', '.join(GROUP)}) ({solved})) or ({early}))"
                    f" unless on ({', '.join(GROUP)}) {idle}"),
            f("precursor-oversized-updates"),
            "Early warning: oversized policy updates (from the first steps, or after the run learned), learning-rate collapse ahead ({{ $labels.run }})",
            "The optimiser steps of {{ $labels.component }} (run {{ $labels.run }}) move the policy {{ $value | "
            f"humanize }}}} nats per token or more in {o['min_steps'] / o['window']:.0%} of the last {recent} (over "
            f"{o['kl_above']:g}) while its entropy "
            f"is under {o['entropy_share_below']:.0%} of its first {o['baseline']:g} steps' level and the training reward "
            f"has climbed by {o['reward_gain']:g}+ over theirs (held-out success, once evaluated twice, at least "
            f"{o['reward_heldout_floor']:g} over its first evaluation at its best; or held-out success's last "
            f"{o['heldout_recent']:g} evaluations {o['heldout_gain']:g}+ over the first), or over "
            f"{o['early_kl_above']:g} in {o['early_min_steps'] / o['early_window']:.0%} of its updates (or their median "
            f"over {o['early_median_above']:g}) within its first "
            f"{o['early_steps']:g} steps (before anything was learned, and not only Adam's first few steps: the "
            "lr's own size), and its last step had a gradient (a solved task's steps have none and move nothing) "
            f"and, after it learned, the policy is not solved (a median of {o['solved_zero_std']:.0%}+ of its groups "
            f"zero-std at a median reward of {o['solved_reward']:g}+: the few groups left carry each update): "
            "the learning rate is too high, "
            "the precursor of a collapse (the reward fell "
            f"{min(o['impact_steps_low'], o['early_impact_steps_low']):g}-"
            f"{max(o['impact_steps_high'], o['early_impact_steps_high']):g} steps later in the early-warning bench). Lower the "
            "learning rate or the warm-up peak; resume from a checkpoint before the warning.",
            PromtoolCase((("rlobs_policy_update_kl", {}, "0.001+0.0000001x70 0.1+0.0000001x20"),
                          ("rlobs_policy_entropy", {}, "1x70 0.5x20"),
                          ("rlobs_reward_mean", {}, "0.2x70 0.5x20"), ("rlobs_reward_baseline", {}, "0.2x90"),
                          ("rlobs_policy_entropy_baseline", {}, "1x90")),
                         "100m", not_yet_min=70, firing_min=88)),
        AlertRule(
            "precursor-reward-hacking", "warning", stepping(f"({hacking}) or ({audit})"),
            f("precursor-reward-hacking"),
            "Early warning: training reward climbing away from held-out success, reward hacking ({{ $labels.run }})",
            "In run {{ $labels.run }} ({{ $labels.component }}) the training reward has climbed {{ $value | humanize }} "
            f"over the last {recent} against its early level in the {history} before ({h['reward_gain']:g}+) while "
            f"held-out success (an exact check on prompts it never trains on) gained at most "
            f"{h['heldout_share']:.0%} of that, now and {recent} before (two held-out readings); or it pays {{{{ $value | humanize }}}} more than an exact check on the "
            f"same training samples ({h['audit_above']:g}+, up {h['audit_gain']:g}+ on the {history} before): the grader "
            "pays for something that is not success (a loophole) and every further step trains it. Audit the grader on the run's own samples, fix it, resume from a checkpoint before the warning.",
            PromtoolCase((("rlobs_reward_mean", {}, "0.2x70 0.7x20"),
                          ("rlobs_heldout_success", {"component": "driver"}, "0.3x90")), "500m",
                         not_yet_min=70, firing_min=88)),
    )
    if step_seconds != PRECURSOR_STEP_SECONDS:
        out = tuple(dataclasses.replace(r, for_=scaled_duration(r.for_, step_seconds), step_seconds=step_seconds)
                    for r in out)
    return out


BASE_RULES: tuple[AlertRule, ...] = RULES  # every alert but the precursors, whose windows follow the step time
RULES = RULES + precursor_rules()
ALERT_IDS: tuple[str, ...] = tuple(r.id for r in RULES)
if len(set(ALERT_IDS)) != len(ALERT_IDS):
    raise ValueError("alert ids repeat")


def rule(alert_id: str) -> AlertRule:
    for r in RULES:
        if r.id == alert_id:
            return r
    raise ValueError(f"unknown alert {alert_id!r}; valid: {', '.join(ALERT_IDS)}")


def rules_for(step_seconds: float = PRECURSOR_STEP_SECONDS) -> tuple[AlertRule, ...]:
    """Every alert rule, the precursors built for steps of ``step_seconds`` (the committed: ``RULES``)."""
    return RULES if step_seconds == PRECURSOR_STEP_SECONDS else BASE_RULES + precursor_rules(step_seconds=step_seconds)


def rules_document(base: str | None = None, step_seconds: float = PRECURSOR_STEP_SECONDS) -> dict[str, object]:
    return {"groups": [{"name": RULE_GROUP, "rules": [
        {"alert": r.name, "expr": r.expr, "for": r.for_, "labels": r.labels,
         "annotations": r.annotations(base)} for r in rules_for(step_seconds)]}]}


def _built_for(step_seconds: float) -> str:
    step_seconds = rules_step_seconds(step_seconds)
    if step_seconds == PRECURSOR_STEP_SECONDS:
        return ""
    w = precursor_windows(step_seconds)
    return (f"# The precursor alerts are built for optimiser steps of {step_seconds:g} s (--step-seconds): their "
            f"windows {w['recent']} and {w['history']}.\n")


def rules_yaml(base: str | None = None, step_seconds: float = PRECURSOR_STEP_SECONDS) -> str:
    header = "# Generated by `rlobs dashboards build` from rlobs/dashboards/alerts.py: do not edit.\n"
    return header + _built_for(step_seconds) + to_yaml(rules_document(base, step_seconds))


def _render(template: str, labels: Mapping[str, str], value_text: str, query_text: str = "") -> str:
    """Render the template subset the annotations use, as Prometheus would for the case."""
    out = re.sub(r"\{\{ with query .*? \}\}.*?\{\{ end \}\}", lambda m: query_text, template)
    out = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], out)
    return re.sub(r"\{\{ \$value[^}]*\}\}", value_text, out)


def _case_test(r: AlertRule, runbook_base: str | None = None) -> dict[str, object]:
    """``not_yet_min``: quiet; ``firing_min``: fires; for a rule gated on ``running``, one minute later the
    process's target is gone (its run ended cleanly) and the alert must be gone with it."""
    c = r.case
    base = {**CASE_LABELS, "component": c.component}
    gated = c.up and "up" in metric_names(r.expr)

    def sel(name: str, labels: Mapping[str, str]) -> str:
        return f"{name}{{{','.join(f'{k}={v!r}'.replace(chr(39), chr(34)) for k, v in labels.items())}}}"

    input_series = [{"series": sel(name, {**base, **extra}), "values": values} for name, extra, values in c.series]
    stamp = "rlobs_train_step_last_timestamp_seconds"
    if stamp in metric_names(r.expr) and stamp not in {name for name, _, _ in c.series}:
        # a rule that asks its run to be stepping (the precursors' fresh_data) and a case that does not say how: the
        # trainer steps once a case minute up to the firing time
        input_series.append({"series": sel(stamp, base), "values": f"0+{_case_minute(r)}x{c.firing_min}"})
    steps = "rlobs_train_steps_total"
    if steps in metric_names(r.expr) and steps not in {name for name, _, _ in c.series}:
        # likewise its step counter (the drift alerts ask the window before to hold the doctor's reference steps)
        input_series.append({"series": sel(steps, base), "values": f"0+1x{c.firing_min}"})
    if gated:
        input_series.append({"series": sel("up", {**base, "component": c.up_component or base["component"]}),
                             "values": f"1x{c.firing_min} stale"})
    alert_labels = {**r.labels, "run": base["run"], "component": base["component"], **c.labels}
    annotations = {k: _render(v, alert_labels, c.value_text, c.query_text)
                   for k, v in r.annotations(runbook_base).items()}

    def at(minutes: int) -> str:  # the case's minutes, at the rule's step time (its series as much slower)
        return f"{minutes}m" if r.step_seconds == PRECURSOR_STEP_SECONDS else f"{minutes * _case_minute(r)}s"

    checks: list[dict[str, object]] = [
        {"eval_time": at(c.not_yet_min), "alertname": r.name, "exp_alerts": []},
        {"eval_time": at(c.firing_min), "alertname": r.name,
         "exp_alerts": [{"exp_labels": alert_labels, "exp_annotations": annotations}]},
    ]
    if gated:
        checks.append({"eval_time": at(c.firing_min + 1), "alertname": r.name, "exp_alerts": []})
    return {
        "name": f"{r.name}: not yet at {at(c.not_yet_min)}, firing at {at(c.firing_min)}"
                + (f", gone at {at(c.firing_min + 1)} once the process ended" if gated else ""),
        "interval": at(1),
        "input_series": input_series,
        "alert_rule_test": checks,
    }


def _case_minute(r: AlertRule) -> int:
    """A promtool case's minute at the rule's step time, whole seconds (a precursor built for 300 s a step: 150)."""
    return max(1, round(60 * r.step_seconds / PRECURSOR_STEP_SECONDS))


def promtool_tests_yaml(rules_file: str = "alerts.yaml", base: str | None = None,
                        step_seconds: float = PRECURSOR_STEP_SECONDS) -> str:
    rules = rules_for(step_seconds)
    # the rules are evaluated on every case's grid: the other alerts' minutes and the precursors' scaled minute
    every = "1m" if step_seconds == PRECURSOR_STEP_SECONDS else f"{math.gcd(60, *map(_case_minute, rules))}s"
    doc = {"rule_files": [rules_file], "evaluation_interval": every,
           "tests": [_case_test(r, base) for r in rules]}
    header = ("# Generated by `rlobs dashboards build` from rlobs/dashboards/alerts.py: do not edit.\n"
              "# promtool test rules dashboards/alerts_test.yaml\n")
    return header + _built_for(step_seconds) + to_yaml(doc)
