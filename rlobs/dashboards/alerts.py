"""Prometheus alert rules for rlobs, as data: one ``AlertRule`` per failure that can be seen live.

Every rule carries ``severity``, ``summary``, ``description`` and a ``runbook_url`` built from ONE
pattern (``runbook_url(id)`` = ``RUNBOOK_BASE_URL`` + ``<id>.md``; the page is ``runbooks/<id>.md``),
and a ``PromtoolCase``: synthetic input series with the time the alert must not yet fire and the
time it must fire, with its labels and rendered annotations. ``rules_yaml()`` and
``promtool_tests_yaml()`` render both files from this one table (``rlobs dashboards build``).

Thresholds are ``AlertThresholds`` fields with field-derived defaults; change them in one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from rlobs.dashboards.model import to_yaml
from rlobs.dashboards.selectors import (
    ALERT,
    GROUP,
    Scope,
    agg,
    histogram_mean,
    new_or_increase,
    rate,
    series,
)
from rlobs.runbooks import PUBLISHED_BASE
from rlobs.runbooks import runbook_url as _runbook_url

RUNBOOK_BASE_URL = PUBLISHED_BASE
RULE_GROUP = "rlobs"
SEVERITIES = ("critical", "warning", "info")


def runbook_url(runbook_id: str, base: str | None = None) -> str:
    """The one pattern every alert's (and doctor finding's) runbook link follows: ``<base>/<id>.md``, with
    the base from ``--runbook-base-url`` or ``RLOBS_RUNBOOK_BASE_URL`` (see ``rlobs.runbooks``), else
    rlobs' published pages."""
    return _runbook_url(runbook_id, base)


@dataclass(frozen=True, slots=True)
class AlertThresholds:
    """Alert thresholds; the defaults come from the field notes in DESIGN.md."""

    staleness_max_versions: int = 4  # set to the run's max_staleness bound
    sync_boundary_mean_seconds: float = 30.0  # mean duration of one sync boundary over 10 min
    advantage_abs_max: float = 10.0  # GRPO |advantage| is <= sqrt(G-1) (~4 at G=16) with a sane std
    zero_std_groups_ratio: float = 0.5  # over half the groups carry no signal
    grader_timeout_ratio: float = 0.05
    trainer_data_wait_ratio: float = 0.5  # trainer waits for data over half its wall time
    parity_mean_abs_dlogp: float = 0.01  # < 0.005 healthy, > 0.01 a problem
    heartbeat_silence_seconds: float = 120.0


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


@dataclass(frozen=True, slots=True)
class AlertRule:
    id: str
    severity: str
    expr: str
    for_: str
    summary: str
    description: str
    case: PromtoolCase

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", self.id):
            raise ValueError(f"alert id {self.id!r}: use kebab-case")
        if self.severity not in SEVERITIES:
            raise ValueError(f"alert {self.id!r}: severity {self.severity!r}; valid: {SEVERITIES}")

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


def trainer_wait_share(scope: Scope, by: tuple[str, ...] = ()) -> str:
    """Share of trainer time spent waiting for batches: wait / (wait + optimiser step).

    A ratio of two rates over the same window, so it is right even for a series younger than the
    window (a bare ``rate`` would be diluted by the empty part of the window) and for many ranks.
    """
    wait = agg("sum", rate("rlobs_trainer_data_wait_seconds_total", scope), by)
    step = agg("sum", rate("rlobs_trainer_step_seconds_total", scope), by)
    return f"{wait} / ({wait} + {step})"


def _counter_alert(metric: str, by: tuple[str, ...] = GROUP, **labels: str | tuple[str, str]) -> str:
    return _gt(agg("sum", new_or_increase(metric, _W10, **labels), by), 0)


_BORN = "_x6 1x13"  # a counter series born at minute 6 (prometheus_client creates it on first event)

RULES: tuple[AlertRule, ...] = (
    AlertRule(
        "staleness-over-bound", "warning",
        _gt(agg("max", series("rlobs_staleness_max_versions", ALERT), GROUP), T.staleness_max_versions), "2m",
        "Samples older than the staleness bound are being trained on ({{ $labels.run }})",
        "The last consumed batch of {{ $labels.component }} in run {{ $labels.run }} had samples "
        f"{{{{ $value }}}} policy versions old (bound {T.staleness_max_versions}). Either the max-staleness "
        "filter is off or the generator runs far ahead of the trainer.",
        PromtoolCase((("rlobs_staleness_max_versions", {}, "1x5 12x14"),), "12", not_yet_min=7, firing_min=8)),
    AlertRule(
        "weight-sync-boundary-failed", "critical",
        _counter_alert("rlobs_weight_sync_boundaries_total", (*GROUP, "boundary", "outcome"),
                       outcome=("=~", "error|torn")),
        "0m",
        "Weight sync failed at the {{ $labels.boundary }} boundary ({{ $labels.run }})",
        "{{ $value }} weight-sync span(s) at boundary {{ $labels.boundary }} ended with outcome "
        "{{ $labels.outcome }} in the last 10 minutes ({{ $labels.component }}, run {{ $labels.run }}). "
        "The generator may serve a stale or partial policy.",
        PromtoolCase((("rlobs_weight_sync_boundaries_total", {"boundary": "staging", "outcome": "torn"}, _BORN),
                      ("rlobs_weight_sync_boundaries_total", {"boundary": "staging", "outcome": "ok"}, "0+1x19")),
                     "1", labels={"boundary": "staging", "outcome": "torn"}, not_yet_min=5, firing_min=6,
                     component="generator")),
    AlertRule(
        "weight-sync-fingerprint-mismatch", "critical",
        _counter_alert("rlobs_weight_sync_fingerprint_mismatches_total"), "0m",
        "Generator loaded weights that differ from the trainer's ({{ $labels.run }})",
        "{{ $value }} weight load(s) in {{ $labels.component }} produced fingerprints different from the "
        "trainer's dump in the last 10 minutes (run {{ $labels.run }}): the generator samples from a "
        "policy nobody trained.",
        PromtoolCase((("rlobs_weight_sync_fingerprint_mismatches_total", {}, _BORN),), "1",
                     not_yet_min=5, firing_min=6, component="generator")),
    AlertRule(
        "weight-sync-cache-not-reset", "critical",
        _counter_alert("rlobs_weight_sync_cache_reset_unconfirmed_total"), "0m",
        "KV/prefix cache not confirmed reset after a weight sync ({{ $labels.run }})",
        "{{ $value }} sync(s) in {{ $labels.component }} (run {{ $labels.run }}) finished without the engine "
        "confirming the KV/prefix-cache reset: cached keys/values from the old policy can leak into new "
        "rollouts.",
        PromtoolCase((("rlobs_weight_sync_cache_reset_unconfirmed_total", {}, _BORN),), "1",
                     not_yet_min=5, firing_min=6, component="generator")),
    AlertRule(
        "weight-sync-slow", "warning",
        _gt(histogram_mean("rlobs_weight_sync_boundary_seconds", _W10, (*GROUP, "boundary")),
            T.sync_boundary_mean_seconds), "5m",
        "Weight sync boundary {{ $labels.boundary }} is slow ({{ $labels.run }})",
        "The {{ $labels.boundary }} boundary took {{ $value | humanizeDuration }} on average over 10 minutes "
        f"in {{{{ $labels.component }}}} (run {{{{ $labels.run }}}}), over {T.sync_boundary_mean_seconds:g} s. "
        "Policy lag and staleness grow with it.",
        PromtoolCase((("rlobs_weight_sync_boundary_seconds_sum", {"boundary": "transfer"}, "0+45x19"),
                      ("rlobs_weight_sync_boundary_seconds_count", {"boundary": "transfer"}, "0+1x19")),
                     "45s", labels={"boundary": "transfer"}, not_yet_min=5, firing_min=6, component="generator")),
    AlertRule(
        "grad-norm-nonfinite", "critical",
        _counter_alert("rlobs_grad_norm_nonfinite_total"), "0m",
        "NaN/Inf gradient norm ({{ $labels.run }})",
        "{{ $value }} optimiser step(s) in {{ $labels.component }} (run {{ $labels.run }}) had a non-finite "
        "gradient norm in the last 10 minutes. Check the advantage denominator before the model.",
        PromtoolCase((("rlobs_grad_norm_nonfinite_total", {}, _BORN),), "1", not_yet_min=5, firing_min=6)),
    AlertRule(
        "grad-norm-spike", "warning",
        _counter_alert("rlobs_grad_norm_spikes_total"), "0m",
        "Gradient-norm spike ({{ $labels.run }})",
        "The grad-norm spike detector fired {{ $value }} time(s) in {{ $labels.component }} (run "
        "{{ $labels.run }}) in the last 10 minutes. Check the advantage denominator before blaming the model.",
        PromtoolCase((("rlobs_grad_norm_spikes_total", {}, _BORN),), "1", not_yet_min=5, firing_min=6)),
    AlertRule(
        "advantage-denominator-collapse", "critical",
        f"{_gt(agg('max', series('rlobs_advantage_abs_max', ALERT), GROUP), T.advantage_abs_max)} or "
        f"{_counter_alert('rlobs_advantage_nonfinite_denominators_total')}", "1m",
        "Advantage denominator collapsed ({{ $labels.run }})",
        "Max |advantage| (or the count of NaN/zero denominators) reached {{ $value }} in {{ $labels.component }} "
        f"(run {{{{ $labels.run }}}}); healthy GRPO advantages stay under {T.advantage_abs_max:g}. Groups with a "
        "near-zero reward std are amplifying their advantages.",
        PromtoolCase((("rlobs_advantage_abs_max", {}, "2x5 50x14"),), "50", not_yet_min=6, firing_min=7)),
    AlertRule(
        "advantage-rank-disagreement", "critical",
        _counter_alert("rlobs_advantage_rank_disagreements_total"), "0m",
        "Data-parallel ranks disagree on the loss denominator ({{ $labels.run }})",
        "{{ $value }} step(s) in {{ $labels.component }} (run {{ $labels.run }}) where data-parallel ranks "
        "divided the loss by different token counts: gradients are mis-scaled per rank.",
        PromtoolCase((("rlobs_advantage_rank_disagreements_total", {}, _BORN),), "1",
                     not_yet_min=5, firing_min=6)),
    AlertRule(
        "advantage-zero-std-groups", "warning",
        _gt(agg("max", series("rlobs_advantage_zero_std_groups_ratio", ALERT), GROUP), T.zero_std_groups_ratio),
        "5m",
        "Most GRPO groups carry no learning signal ({{ $labels.run }})",
        "{{ $value | humanizePercentage }} of groups in the last batch of {{ $labels.component }} (run "
        "{{ $labels.run }}) had identical rewards (std 0), so their advantages are zero.",
        PromtoolCase((("rlobs_advantage_zero_std_groups_ratio", {}, "0.1x5 0.8x14"),), "80%",
                     not_yet_min=10, firing_min=11)),
    AlertRule(
        "grader-timeouts", "warning",
        _gt(f"{agg('sum', rate('rlobs_grader_calls_total', ALERT, outcome='timeout'), (*GROUP, 'grader_kind'))}"
            f" / {agg('sum', rate('rlobs_grader_calls_total', ALERT), (*GROUP, 'grader_kind'))}",
            T.grader_timeout_ratio), "2m",
        "Grader {{ $labels.grader_kind }} is timing out ({{ $labels.run }})",
        "{{ $value | humanizePercentage }} of {{ $labels.grader_kind }} grader calls timed out over 5 minutes in "
        "{{ $labels.component }} (run {{ $labels.run }}). Timed-out samples are dropped or get no reward.",
        PromtoolCase((("rlobs_grader_calls_total", {"grader_kind": "code", "outcome": "ok"}, "0+9x19"),
                      ("rlobs_grader_calls_total", {"grader_kind": "code", "outcome": "timeout"}, "0+1x19")),
                     "10%", labels={"grader_kind": "code"}, not_yet_min=2, firing_min=3, component="grader")),
    AlertRule(
        "grader-hung", "critical",
        _gt(agg("max", series("rlobs_grader_overdue_calls", ALERT), (*GROUP, "grader_kind")), 0), "2m",
        "Grader {{ $labels.grader_kind }} has calls stuck past their deadline ({{ $labels.run }})",
        "{{ $value }} {{ $labels.grader_kind }} grader call(s) in {{ $labels.component }} (run {{ $labels.run }}) "
        "are still in flight past their deadline. A hung grader looks like a deadlock elsewhere.",
        PromtoolCase((("rlobs_grader_overdue_calls", {"grader_kind": "judge"}, "0x5 3x14"),), "3",
                     labels={"grader_kind": "judge"}, not_yet_min=7, firing_min=8, component="grader")),
    AlertRule(
        "trainer-starved", "warning",
        _gt(trainer_wait_share(ALERT, GROUP), T.trainer_data_wait_ratio), "5m",
        "Trainer is waiting for data ({{ $labels.run }})",
        "{{ $labels.component }} spent {{ $value | humanizePercentage }} of its time over the last 5 minutes "
        "waiting for batches instead of stepping (run {{ $labels.run }}): the generator or graders cannot keep up.",
        PromtoolCase((("rlobs_trainer_data_wait_seconds_total", {}, "0+48x19"),
                      ("rlobs_trainer_step_seconds_total", {}, "0+12x19")), "80%", not_yet_min=5, firing_min=6)),
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
        _counter_alert("rlobs_parity_config_mismatches_total"), "0m",
        "Tokenizer / chat template / sampling parameters differ between generator and trainer ({{ $labels.run }})",
        "{{ $value }} batch(es) in {{ $labels.component }} (run {{ $labels.run }}) were generated with "
        "tokenizer, chat-template or sampling hashes different from the trainer's.",
        PromtoolCase((("rlobs_parity_config_mismatches_total", {}, _BORN),), "1", not_yet_min=5, firing_min=6)),
    AlertRule(
        "ledger-samples-repeated", "critical",
        _counter_alert("rlobs_ledger_duplicate_transitions_total", (*GROUP, "state")), "0m",
        "Samples went through the same ledger transition twice ({{ $labels.run }})",
        "{{ $value }} sample(s) were {{ $labels.state }} again in {{ $labels.component }} (run {{ $labels.run }}) "
        "over 10 minutes: exactly-once is violated, typically by a resume that replays samples.",
        PromtoolCase((("rlobs_ledger_duplicate_transitions_total", {"state": "consumed"}, _BORN),), "1",
                     labels={"state": "consumed"}, not_yet_min=5, firing_min=6, component="buffer")),
    AlertRule(
        "telemetry-drops", "warning",
        _counter_alert("rlobs_telemetry_dropped_total", (*GROUP, "reason")), "2m",
        "rlobs is dropping telemetry events ({{ $labels.run }})",
        "{{ $value }} telemetry event(s) were dropped for reason {{ $labels.reason }} in {{ $labels.component }} "
        "(run {{ $labels.run }}) over 10 minutes. Dashboards, alerts and the doctor see an incomplete run.",
        PromtoolCase((("rlobs_telemetry_dropped_total", {"reason": "queue_full", "sink": "runstore"}, "_x6 7x13"),),
                     "7", labels={"reason": "queue_full"}, not_yet_min=7, firing_min=8)),
    AlertRule(
        "heartbeat-lost", "critical",
        _gt(f"time() - {agg('max', 'max_over_time(' + series('rlobs_heartbeat_timestamp_seconds', ALERT) + '[15m])', GROUP)}",
            T.heartbeat_silence_seconds), "1m",
        "{{ $labels.component }} stopped sending heartbeats ({{ $labels.run }})",
        "No heartbeat from {{ $labels.component }} of run {{ $labels.run }} for {{ $value | humanizeDuration }}. "
        "The process is stuck or dead; its last heartbeat phase says where.",
        PromtoolCase((("rlobs_heartbeat_timestamp_seconds", {"phase": "train"}, "0+60x5"),), "4m 0s",
                     not_yet_min=8, firing_min=9)),
)

ALERT_IDS: tuple[str, ...] = tuple(r.id for r in RULES)
if len(set(ALERT_IDS)) != len(ALERT_IDS):
    raise ValueError("alert ids repeat")


def rule(alert_id: str) -> AlertRule:
    for r in RULES:
        if r.id == alert_id:
            return r
    raise ValueError(f"unknown alert {alert_id!r}; valid: {', '.join(ALERT_IDS)}")


def rules_document(base: str | None = None) -> dict[str, object]:
    return {"groups": [{"name": RULE_GROUP, "rules": [
        {"alert": r.name, "expr": r.expr, "for": r.for_, "labels": r.labels,
         "annotations": r.annotations(base)} for r in RULES]}]}


def rules_yaml(base: str | None = None) -> str:
    header = "# Generated by `rlobs dashboards build` from rlobs/dashboards/alerts.py: do not edit.\n"
    return header + to_yaml(rules_document(base))


def _render(template: str, labels: Mapping[str, str], value_text: str) -> str:
    """Render the template subset the annotations use, as Prometheus would for the case."""
    out = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)
    return re.sub(r"\{\{ \$value[^}]*\}\}", value_text, out)


def _case_test(r: AlertRule, runbook_base: str | None = None) -> dict[str, object]:
    c = r.case
    base = {**CASE_LABELS, "component": c.component}
    input_series = []
    for name, extra, values in c.series:
        labels = {**base, **extra}
        sel = ",".join(f'{k}="{v}"' for k, v in labels.items())
        input_series.append({"series": f"{name}{{{sel}}}", "values": values})
    alert_labels = {**r.labels, "run": base["run"], "component": base["component"], **c.labels}
    annotations = {k: _render(v, alert_labels, c.value_text) for k, v in r.annotations(runbook_base).items()}
    return {
        "name": f"{r.name}: not yet at {c.not_yet_min}m, firing at {c.firing_min}m",
        "interval": "1m",
        "input_series": input_series,
        "alert_rule_test": [
            {"eval_time": f"{c.not_yet_min}m", "alertname": r.name, "exp_alerts": []},
            {"eval_time": f"{c.firing_min}m", "alertname": r.name,
             "exp_alerts": [{"exp_labels": alert_labels, "exp_annotations": annotations}]},
        ],
    }


def promtool_tests_yaml(rules_file: str = "alerts.yaml", base: str | None = None) -> str:
    doc = {"rule_files": [rules_file], "evaluation_interval": "1m", "tests": [_case_test(r, base) for r in RULES]}
    header = ("# Generated by `rlobs dashboards build` from rlobs/dashboards/alerts.py: do not edit.\n"
              "# promtool test rules dashboards/alerts_test.yaml\n")
    return header + to_yaml(doc)
