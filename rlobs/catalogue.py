"""The metric catalogue: every Prometheus metric rlobs exports, defined once, as data.

Each ``MetricSpec`` names the metric, its type, unit, help text and labels, and (for metrics derived
from events) the ``Source``: which event kind and field feed it and how (count, sum, set, observe).
The Prometheus sink, the dashboards, the alert rules, the docs and the tests all read this table.

Rules, checked when a spec is defined (``ValueError`` at import, not at use):
- names start with ``rlobs_``; counters end in ``_total`` and nothing else does;
- the unit shows as a suffix (``_seconds``, ``_bytes``, ``_ratio``, ...);
- no ids in labels (sample, group, prompt, step, version, trace ids);
- a source names an existing event kind and fields, and its op fits the metric type.

Every metric also carries the implicit labels ``run`` and ``component`` (``IMPLICIT_LABELS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any, Mapping

from rlobs.schema import ENVELOPE_NAMES, KINDS

IMPLICIT_LABELS = ("run", "component")
FORBIDDEN_LABELS = frozenset({
    "sample_id", "group_id", "prompt_id", "step", "version", "policy_version", "trace_id", "span_id",
    "id", "pid", "process", "request_id", "ts", "ts_ns",
})
TYPES = ("counter", "gauge", "histogram")
UNIT_SUFFIX = {
    "seconds": "_seconds",
    "timestamp_seconds": "_timestamp_seconds",
    "bytes": "_bytes",
    "bytes_per_second": "_bytes_per_second",
    "ratio": "_ratio",
    "tokens": "_tokens",
    "tokens_per_second": "_tokens_per_second",
    "samples_per_second": "_samples_per_second",
    "versions": "_versions",
    "1": "",
}
RUNNING = ("", "max", "mean")  # Source.running: none, the best so far, the mean of the last few
OPS_BY_TYPE = {"counter": ("count", "sum"), "gauge": ("set",), "histogram": ("observe",)}
DEFAULT_BUCKETS = {
    "seconds": (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0),
    "versions": (0, 1, 2, 3, 4, 6, 8, 12, 16, 32),
    "tokens": (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
}


# scalar names read as held-out success (exact match on prompts the run never trains on) and as the training reward's
# excess over an audit grader on the same samples: the canonical rlobs/ name any trainer can log, and trainer_ref's.
# The doctor's precursor rules and the live gauges read the same names
HELDOUT_SCALARS = ("rlobs/heldout_success", "eval_reward_mean")
AUDIT_SCALARS = ("rlobs/grader_audit_gap", "grader_audit_gap")
# the steps rlobs_reward_baseline takes the median of: precursor-oversized-updates' `baseline` (rlobs.failures; a
# test holds them equal)
REWARD_BASELINE_STEPS = 5
# the held-out evaluations after the first whose mean rlobs_heldout_success_recent serves: precursor-oversized-updates'
# `heldout_recent` (a test holds them equal)
HELDOUT_RECENT = 2


@dataclass(frozen=True, slots=True)
class Source:
    """How events feed a metric."""

    kind: str
    op: str  # count | sum | set | observe
    field: str | None = None  # value field; None for count
    labels: Mapping[str, str] = dc_field(default_factory=dict)  # metric label -> event field
    where: Mapping[str, Any] = dc_field(default_factory=dict)  # event field -> required value (a tuple: any of them)
    scale: float = 1.0  # value multiplier (e.g. 1e-9 for ns -> s)
    finite_only: bool = False  # "set": keep the last finite value (a NaN means "no tokens", not a reading)
    # "set": no series until an event carries a value (where the default 0 of an unset gauge would be a claim:
    # a correction cap of 0 reads "no correction")
    absent_until_set: bool = False
    # "set": a baseline, set once: the median of the first ``first`` finite values each label set receives, and no
    # series until then (the doctor's rules compare with a run's first steps; a live alert can read them only if
    # the exporter keeps them). Per process: a process restarted from a checkpoint takes its own first values
    first: int = 0
    # "set": a running reading of the finite values after the first ``skip`` each label set receives, and no series
    # before one: "max", the best of them so far; "mean", the mean of the last ``last`` of them. What a live alert
    # reads of a series it cannot index by evaluation (held-out success's best and recent level after its first
    # evaluation, as the doctor's precursor-oversized-updates reads them). Per process, as ``first``
    running: str = ""
    skip: int = 0
    last: int = 0

    def matches(self, fields: Mapping[str, Any]) -> bool:
        """Whether an event's fields pass ``where`` (a tuple value: any of them)."""
        return all((fields.get(k) in v) if isinstance(v, tuple) else fields.get(k) == v
                   for k, v in self.where.items())

    def example_where(self) -> dict[str, Any]:
        """One field assignment that passes ``where`` (a tuple's first value): for emitting a matching event."""
        return {k: v[0] if isinstance(v, tuple) else v for k, v in self.where.items()}


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    type: str
    unit: str
    help: str
    labels: tuple[str, ...] = ()
    source: Source | None = None
    buckets: tuple[float, ...] | None = None
    zero: tuple[tuple[str, ...], ...] = ()  # label values whose series exist at 0 from the start

    def __post_init__(self) -> None:
        n = self.name
        if not n.startswith("rlobs_") or not n.replace("_", "").isalnum() or n != n.lower():
            raise ValueError(f"metric {n!r}: names are lower_snake_case and start with 'rlobs_'")
        if self.type not in TYPES:
            raise ValueError(f"metric {n!r}: unknown type {self.type!r}; valid: {', '.join(TYPES)}")
        if self.unit not in UNIT_SUFFIX:
            raise ValueError(f"metric {n!r}: unknown unit {self.unit!r}; valid: {', '.join(UNIT_SUFFIX)}")
        base = n[: -len("_total")] if n.endswith("_total") else n
        if (self.type == "counter") != n.endswith("_total"):
            raise ValueError(f"metric {n!r}: counters, and only counters, end in '_total'")
        suffix = UNIT_SUFFIX[self.unit]
        if suffix and not base.endswith(suffix) and not (self.unit == "tokens" and "_tokens" in base):
            raise ValueError(f"metric {n!r}: unit {self.unit!r} needs the suffix {suffix!r}")
        if not self.help or not self.help.strip():
            raise ValueError(f"metric {n!r}: help text is required")
        bad = (set(self.labels) & FORBIDDEN_LABELS) | (set(self.labels) & set(IMPLICIT_LABELS))
        if bad:
            raise ValueError(f"metric {n!r}: labels {sorted(bad)} are ids or implicit; ids never go in labels")
        if self.type == "histogram" and self.buckets is None:
            default = DEFAULT_BUCKETS.get(self.unit)
            if default is None:
                raise ValueError(f"metric {n!r}: histogram with unit {self.unit!r} needs explicit buckets")
            object.__setattr__(self, "buckets", default)
        if self.source is not None:
            self._check_source(self.source)
        if self.zero and (self.type != "counter" or any(len(z) != len(self.labels) for z in self.zero)):
            raise ValueError(f"metric {n!r}: zero series are label-value tuples of a counter's labels {self.labels}")

    def _check_source(self, s: Source) -> None:
        n = self.name
        if s.kind not in KINDS:
            raise ValueError(f"metric {n!r}: source kind {s.kind!r} unknown; valid: {', '.join(sorted(KINDS))}")
        known = set(KINDS[s.kind].field_names) | set(ENVELOPE_NAMES)
        if s.op not in OPS_BY_TYPE[self.type]:
            raise ValueError(f"metric {n!r}: op {s.op!r} does not fit a {self.type}; valid: {OPS_BY_TYPE[self.type]}")
        if (s.field is None) != (s.op == "count"):
            raise ValueError(f"metric {n!r}: op {s.op!r} {'needs' if s.op != 'count' else 'takes no'} value field")
        for f in [s.field, *s.labels.values(), *s.where]:
            if f is not None and f not in known:
                raise ValueError(f"metric {n!r}: field {f!r} not in kind {s.kind!r}")
        if set(s.labels) != set(self.labels):
            raise ValueError(f"metric {n!r}: source labels {sorted(s.labels)} != labels {sorted(self.labels)}")
        if s.first and (s.op != "set" or s.first < 0):
            raise ValueError(f"metric {n!r}: first={s.first} keeps a baseline of a 'set' source's first values only")
        if s.running not in RUNNING:
            raise ValueError(f"metric {n!r}: running={s.running!r} unknown; valid: {', '.join(map(repr, RUNNING))}")
        if s.running and (s.op != "set" or s.first):
            raise ValueError(f"metric {n!r}: running={s.running!r} reads a 'set' source's values, not a baseline's")
        if ((s.skip or s.last) and not s.running) or s.skip < 0 or (s.running == "mean") != (s.last > 0):
            raise ValueError(f"metric {n!r}: skip={s.skip} last={s.last}: skip is for a running reading, and last "
                             "(>= 1) for its 'mean' only")
        for k, v in s.where.items():
            if isinstance(v, tuple) and not v:
                raise ValueError(f"metric {n!r}: where {k!r} is an empty tuple (any of nothing): no event would "
                                 "ever feed it; give the value, or the values any of which may match")


def _m(name: str, type_: str, unit: str, help_: str, labels: tuple[str, ...] = (), source: Source | None = None,
       buckets: tuple[float, ...] | None = None, zero: tuple[tuple[str, ...], ...] = ()) -> MetricSpec:
    return MetricSpec(name, type_, unit, help_, labels, source, buckets, zero)


S = Source
_RATIO_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

METRICS: tuple[MetricSpec, ...] = (
    # --- generation / staleness ---
    _m("rlobs_rollouts_total", "counter", "1", "Completions produced by the generator, by finish reason.",
       ("finish_reason",), S("rollout", "count", labels={"finish_reason": "finish_reason"})),
    _m("rlobs_generated_tokens_total", "counter", "tokens", "Completion tokens generated.",
       (), S("rollout", "sum", "completion_tokens")),
    _m("rlobs_rollout_generation_seconds", "histogram", "seconds", "Dispatch-to-completion time of one rollout.",
       (), S("rollout", "observe", "gen_seconds")),
    _m("rlobs_rollout_completion_tokens", "histogram", "tokens", "Completion length of one rollout.",
       (), S("rollout", "observe", "completion_tokens")),
    _m("rlobs_samples_total", "counter", "1", "Sample-ledger transitions by state and drop reason.",
       ("state", "reason"), S("ledger", "count", labels={"state": "state", "reason": "reason"})),
    _m("rlobs_sample_staleness_versions", "histogram", "versions",
       "Policy versions between dispatch and consumption of a consumed sample.",
       (), S("ledger", "observe", "staleness", where={"state": "consumed"})),
    _m("rlobs_sample_age_seconds", "histogram", "seconds", "Age of a sample when consumed.",
       (), S("ledger", "observe", "age_s", where={"state": "consumed"})),
    _m("rlobs_staleness_max_versions", "gauge", "versions", "Max staleness in the last consumed batch.",
       (), S("staleness", "set", "max_staleness")),
    _m("rlobs_staleness_bounded_max_versions", "gauge", "versions",
       "Max staleness in the last consumed batch on the basis the run's bound is checked on, where not dispatch "
       "(trainer_ref --staleness-basis completion: from the group's newest token version).",
       (), S("staleness", "set", "max_bounded_staleness", absent_until_set=True)),
    _m("rlobs_staleness_mean_versions", "gauge", "versions", "Mean staleness in the last consumed batch.",
       (), S("staleness", "set", "mean_staleness")),
    _m("rlobs_importance_ratio_max", "gauge", "1", "Max importance-sampling ratio in the last batch.",
       (), S("staleness", "set", "is_ratio_max")),
    _m("rlobs_importance_ratio_mean", "gauge", "1", "Mean importance-sampling ratio in the last batch.",
       (), S("staleness", "set", "is_ratio_mean")),
    _m("rlobs_importance_clipped_ratio", "gauge", "ratio", "Share of tokens whose IS ratio was truncated.",
       (), S("staleness", "set", "is_clipped_ratio")),
    _m("rlobs_effective_sample_size_ratio", "gauge", "ratio", "Effective sample size over tokens, last batch.",
       (), S("staleness", "set", "ess_ratio")),
    _m("rlobs_importance_correction_cap", "gauge", "1",
       "Importance-ratio cap the trainer's loss applies (0: stale samples used uncorrected).",
       (), S("staleness", "set", "is_correction_cap", absent_until_set=True)),
    # --- queues and throughput ---
    _m("rlobs_queue_depth", "gauge", "1", "Items in a bounded queue.",
       ("queue",), S("queue", "set", "depth", labels={"queue": "queue"})),
    _m("rlobs_queue_capacity", "gauge", "1", "Bound of a queue.",
       ("queue",), S("queue", "set", "capacity", labels={"queue": "queue"})),
    _m("rlobs_queue_oldest_age_seconds", "gauge", "seconds", "Age of the oldest item in a queue.",
       ("queue",), S("queue", "set", "oldest_age_s", labels={"queue": "queue"})),
    _m("rlobs_throughput_samples_per_second", "gauge", "samples_per_second", "Samples per second of this side.",
       (), S("throughput", "set", "samples_per_s")),
    _m("rlobs_throughput_tokens_per_second", "gauge", "tokens_per_second", "Tokens per second of this side.",
       (), S("throughput", "set", "tokens_per_s")),
    _m("rlobs_effective_throughput_samples_per_second", "gauge", "samples_per_second",
       "Generator samples per second that were later consumed by the trainer.",
       (), S("throughput", "set", "effective_samples_per_s")),
    _m("rlobs_idle_ratio", "gauge", "ratio", "Share of the last window this side was idle.",
       (), S("throughput", "set", "idle_ratio")),
    _m("rlobs_predicted_staleness_versions", "gauge", "versions",
       "Equilibrium staleness predicted by generator and trainer rates.",
       (), S("throughput", "set", "predicted_staleness")),
    _m("rlobs_phase_seconds_total", "counter", "seconds", "Seconds spent per phase (cost accounting).",
       ("phase",), S("phase", "sum", "seconds", labels={"phase": "phase"})),
    _m("rlobs_phase_tokens_total", "counter", "tokens", "Tokens handled per phase (cost accounting).",
       ("phase",), S("phase", "sum", "tokens", labels={"phase": "phase"})),
    _m("rlobs_phases_total", "counter", "1", "Phases completed, by phase (with the seconds: a pause's mean length).",
       ("phase",), S("phase", "count", labels={"phase": "phase"})),
    _m("rlobs_phase_end_timestamp_seconds", "gauge", "timestamp_seconds",
       "Wall time the last phase of each name ended (a pause's end counts as progress for the no-progress alert).",
       ("phase",), S("phase", "set", "ts_ns", labels={"phase": "phase"}, scale=1e-9)),
    # --- training ---
    _m("rlobs_train_steps_total", "counter", "1", "Optimiser steps taken.", (), S("train_step", "count")),
    _m("rlobs_train_step_last_timestamp_seconds", "gauge", "timestamp_seconds",
       "Wall time of the last optimiser step (the no-progress alert compares it with now).",
       (), S("train_step", "set", "ts_ns", scale=1e-9)),
    _m("rlobs_train_step_seconds", "histogram", "seconds", "Wall time of one optimiser step.",
       (), S("train_step", "observe", "step_seconds")),
    _m("rlobs_train_tokens_total", "counter", "tokens", "Loss tokens trained on.", (), S("train_step", "sum", "tokens")),
    _m("rlobs_train_loss", "gauge", "1", "Training loss of the last step.", (), S("train_step", "set", "loss")),
    _m("rlobs_grad_norm", "gauge", "1", "Global gradient norm before clipping, last step.",
       (), S("train_step", "set", "grad_norm")),
    _m("rlobs_grad_norm_spike_score", "gauge", "1", "Robust z-score of the last grad norm.",
       (), S("train_step", "set", "spike_score")),
    _m("rlobs_grad_norm_nonfinite_total", "counter", "1", "Steps with a NaN or Inf gradient norm.",
       (), S("train_step", "count", where={"nonfinite": True})),
    _m("rlobs_grad_norm_spikes_total", "counter", "1", "Steps the grad-norm spike detector fired on.",
       (), S("train_step", "count", where={"spike": True})),
    _m("rlobs_grad_clipped_steps_total", "counter", "1", "Steps whose gradient was clipped.",
       (), S("train_step", "count", where={"clipped": True})),
    _m("rlobs_reward_mean", "gauge", "1", "Mean reward of the last training batch.",
       (), S("train_step", "set", "reward_mean")),
    _m("rlobs_trainer_data_wait_seconds_total", "counter", "seconds", "Seconds the trainer waited for batches.",
       (), S("train_step", "sum", "data_wait_s")),
    _m("rlobs_trainer_reward_wait_seconds_total", "counter", "seconds", "Seconds the trainer waited on graders.",
       (), S("train_step", "sum", "reward_wait_s")),
    _m("rlobs_trainer_step_seconds_total", "counter", "seconds", "Seconds spent in optimiser steps.",
       (), S("train_step", "sum", "step_seconds")),
    _m("rlobs_policy_version", "gauge", "1", "Policy version current in this process.",
       (), S("train_step", "set", "policy_version")),
    # --- advantage denominator ---
    _m("rlobs_advantage_zero_std_groups_ratio", "gauge", "ratio", "Share of groups with identical rewards.",
       (), S("advantage", "set", "zero_std_ratio")),
    _m("rlobs_advantage_near_zero_std_groups_ratio", "gauge", "ratio", "Share of groups with 0 < std < threshold.",
       (), S("advantage", "set", "near_zero_std_ratio")),
    _m("rlobs_advantage_abs_max", "gauge", "1", "Max |advantage| in the last batch.",
       (), S("advantage", "set", "max_abs_advantage")),
    _m("rlobs_advantage_denominator_min", "gauge", "1", "Smallest per-group advantage denominator.",
       (), S("advantage", "set", "denom_min")),
    _m("rlobs_advantage_token_denominator", "gauge", "1", "Global token count this rank divides the loss by.",
       (), S("advantage", "set", "token_denominator")),
    _m("rlobs_advantage_nonfinite_denominators_total", "counter", "1", "NaN, Inf or zero denominators seen.",
       (), S("advantage", "sum", "nonfinite_denominators")),
    _m("rlobs_advantage_rank_disagreements_total", "counter", "1",
       "Steps where data-parallel ranks disagreed on the loss denominator.",
       (), S("advantage", "count", where={"ranks_agree": False})),
    # --- weight sync ---
    _m("rlobs_weight_sync_boundary_seconds", "histogram", "seconds", "Duration of one weight-sync boundary.",
       ("boundary",), S("weight_sync", "observe", "duration_s", labels={"boundary": "boundary"})),
    _m("rlobs_weight_sync_boundaries_total", "counter", "1", "Weight-sync boundary spans by outcome.",
       ("boundary", "outcome"), S("weight_sync", "count", labels={"boundary": "boundary", "outcome": "outcome"})),
    _m("rlobs_weight_sync_bytes_total", "counter", "bytes", "Bytes handled per weight-sync boundary.",
       ("boundary",), S("weight_sync", "sum", "bytes", labels={"boundary": "boundary"})),
    _m("rlobs_weight_sync_bandwidth_bytes_per_second", "gauge", "bytes_per_second",
       "Bandwidth of the last weight transfer.",
       (), S("weight_sync", "set", "bandwidth_bps", where={"boundary": "transfer"})),
    _m("rlobs_weight_sync_fingerprint_mismatches_total", "counter", "1",
       "Loads whose weight fingerprints differ from the trainer's dump.",
       (), S("weight_sync", "count", where={"fingerprint_match": False})),
    _m("rlobs_weight_sync_torn_reads_total", "counter", "1", "Staging-buffer reads torn by a concurrent write.",
       (), S("weight_sync", "count", where={"torn": True})),
    _m("rlobs_weight_sync_lock_wait_seconds", "histogram", "seconds", "Wait for the staging-buffer lock.",
       (), S("weight_sync", "observe", "lock_wait_s", where={"boundary": "staging"})),
    _m("rlobs_weight_sync_memory_high_water_bytes", "gauge", "bytes", "Memory high-water mark at the last load.",
       (), S("weight_sync", "set", "mem_hwm_bytes", where={"boundary": "load"})),
    _m("rlobs_weight_sync_cache_reset_unconfirmed_total", "counter", "1",
       "Syncs whose KV/prefix-cache reset was not confirmed by the engine.",
       (), S("weight_sync", "count", where={"boundary": "cache_reset", "reset_confirmed": False})),
    _m("rlobs_weight_sync_policy_lag_seconds", "histogram", "seconds",
       "From optimiser step to the generator serving that version.",
       (), S("weight_sync", "observe", "duration_s", where={"boundary": "end_to_end"})),
    _m("rlobs_weight_sync_version", "gauge", "1", "Last policy version whose sync finished end to end.",
       (), S("weight_sync", "set", "version", where={"boundary": "end_to_end"})),
    # --- graders ---
    _m("rlobs_grader_calls_total", "counter", "1", "Grader calls by kind and outcome.",
       ("grader_kind", "outcome"), S("grader_call", "count", labels={"grader_kind": "grader_kind", "outcome": "outcome"})),
    _m("rlobs_grader_latency_seconds", "histogram", "seconds", "Latency of one grader call.",
       ("grader_kind",), S("grader_call", "observe", "latency_s", labels={"grader_kind": "grader_kind"})),
    _m("rlobs_grader_queue_wait_seconds", "histogram", "seconds", "Queue wait of one grader call.",
       ("grader_kind",), S("grader_call", "observe", "queue_wait_s", labels={"grader_kind": "grader_kind"})),
    _m("rlobs_grader_inflight_calls", "gauge", "1", "Grader calls in flight.",
       ("grader_kind",), S("grader_inflight", "set", "in_flight", labels={"grader_kind": "grader_kind"})),
    _m("rlobs_grader_overdue_calls", "gauge", "1", "Grader calls in flight past their deadline.",
       ("grader_kind",), S("grader_inflight", "set", "overdue", labels={"grader_kind": "grader_kind"})),
    _m("rlobs_grader_oldest_inflight_seconds", "gauge", "seconds", "Age of the oldest grader call in flight.",
       ("grader_kind",), S("grader_inflight", "set", "oldest_age_s", labels={"grader_kind": "grader_kind"})),
    # --- parity ---
    _m("rlobs_parity_abs_logprob_diff_mean", "gauge", "1", "Mean |logp_train - logp_gen| of the last batch.",
       (), S("parity", "set", "mean_abs_dlogp", finite_only=True)),
    _m("rlobs_parity_abs_logprob_diff_max", "gauge", "1", "Max |logp_train - logp_gen| of the last batch.",
       (), S("parity", "set", "max_abs_dlogp", finite_only=True)),
    _m("rlobs_parity_kl_k3", "gauge", "1", "k3 KL estimate between generator and trainer, last batch.",
       (), S("parity", "set", "kl_k3", finite_only=True)),
    _m("rlobs_parity_config_mismatches_total", "counter", "1",
       "Batches whose tokenizer / template / sampling hashes differ between generator and trainer.",
       (), S("parity", "count", where={"hashes_match": False})),
    # --- liveness, goodput, incidents ---
    _m("rlobs_heartbeat_timestamp_seconds", "gauge", "timestamp_seconds", "Wall time of the last heartbeat, by phase.",
       ("phase",), S("heartbeat", "set", "ts_ns", labels={"phase": "phase"}, scale=1e-9)),
    _m("rlobs_heartbeats_total", "counter", "1", "Heartbeats sent.", (), S("heartbeat", "count")),
    _m("rlobs_goodput_tokens_total", "counter", "tokens",
       "Generated tokens by what became of them (effective carried gradient signal).",
       ("category",), S("goodput", "sum", "tokens", labels={"category": "category"})),
    _m("rlobs_incidents_total", "counter", "1", "Declared incidents (injected faults, notes).",
       ("fault",), S("incident", "count", labels={"fault": "fault"})),
    # --- probes (appended by the probes package) ---
    _m("rlobs_ledger_duplicate_transitions_total", "counter", "1",
       "Sample-ledger transitions that repeat one the sample already made (exactly-once violated).",
       ("state",), S("ledger", "count", labels={"state": "state"}, where={"duplicate": True}),
       zero=(("generated",), ("graded",), ("consumed",), ("dropped",))),
    _m("rlobs_effective_token_ratio", "gauge", "ratio",
       "Tokens that carried gradient signal over all tokens accounted in the last step (goodput).",
       (), S("goodput", "set", "effective_ratio", where={"category": "effective"})),
    _m("rlobs_sync_bubble_seconds_total", "counter", "seconds", "Seconds this side was blocked by weight sync.",
       (), S("throughput", "sum", "sync_bubble_s")),
    _m("rlobs_parity_post_sync_abs_logprob_diff_mean", "gauge", "1",
       "Mean |logp_train - logp_gen| of the first batch after the last weight sync.",
       (), S("parity", "set", "mean_abs_dlogp", finite_only=True, where={"first_after_sync": True})),
    _m("rlobs_advantage_denominator_p50", "gauge", "1", "Median per-group advantage denominator, last batch.",
       (), S("advantage", "set", "denom_p50")),
    # --- the recorder itself (direct; no event source) ---
    _m("rlobs_telemetry_dropped_total", "counter", "1", "Telemetry events dropped, by reason and sink.",
       ("reason", "sink")),
    _m("rlobs_telemetry_events_total", "counter", "1", "Telemetry events accepted by the recorder.", ()),
    _m("rlobs_telemetry_queue_depth", "gauge", "1", "Events waiting in the recorder queue.", ()),
    _m("rlobs_build_info", "gauge", "1", "Always 1; the rlobs version, record schema and Python of this process "
       "in labels (join on run, component to see what each process runs).",
       ("rlobs_version", "schema_version", "python_version")),
    # --- early-warning signals (issue 18: the precursor alerts read them) ---
    _m("rlobs_policy_entropy", "gauge", "1", "Mean token entropy of the policy on the last training batch.",
       (), S("train_step", "set", "entropy", finite_only=True)),
    _m("rlobs_reference_kl", "gauge", "1", "Mean per-token KL to the reference policy (k3) on the last batch.",
       (), S("train_step", "set", "kl", finite_only=True)),
    _m("rlobs_heldout_success", "gauge", "1",
       "Held-out success of the last evaluation (exact match on prompts the run never trains on; scalar "
       "rlobs/heldout_success, or trainer_ref's eval_reward_mean).", (),
       S("scalar", "set", "value", where={"name": HELDOUT_SCALARS}, finite_only=True, absent_until_set=True)),
    # the baselines RlobsPrecursorOversizedUpdates reads "the run has learned" from, as the doctor's rule does
    # (precursor-oversized-updates' baseline steps and the first evaluation; the fifty-third early-warning run)
    _m("rlobs_reward_baseline", "gauge", "1",
       f"Median training reward of this process's first {REWARD_BASELINE_STEPS} steps (set once): the level a live "
       "alert reads 'the run has learned' from.", (),
       S("train_step", "set", "reward_mean", finite_only=True, first=REWARD_BASELINE_STEPS)),
    _m("rlobs_heldout_success_baseline", "gauge", "1",
       "Held-out success of this process's first evaluation (set once; scalar rlobs/heldout_success, or trainer_ref's "
       "eval_reward_mean).", (),
       S("scalar", "set", "value", where={"name": HELDOUT_SCALARS}, finite_only=True, first=1)),
    # ... and what RlobsPrecursorOversizedUpdates reads of the run's evaluations since, as the doctor's rule does (the
    # fifty-seventh early-warning run): the entropy's early level, held-out success's best evaluation after the first
    # (the training reward's climb counts only where held-out success confirmed it once) and its recent level
    _m("rlobs_policy_entropy_baseline", "gauge", "1",
       f"Median policy entropy of this process's first {REWARD_BASELINE_STEPS} steps (set once): the level a live "
       "alert reads 'the policy sharpened' from.", (),
       S("train_step", "set", "entropy", finite_only=True, first=REWARD_BASELINE_STEPS)),
    _m("rlobs_heldout_success_best", "gauge", "1",
       "Best held-out success of this process's evaluations after its first (absent until a second evaluation).", (),
       S("scalar", "set", "value", where={"name": HELDOUT_SCALARS}, finite_only=True, running="max", skip=1)),
    _m("rlobs_heldout_success_recent", "gauge", "1",
       f"Mean held-out success of this process's last {HELDOUT_RECENT} evaluations after its first (absent until a "
       "second evaluation): what the policy holds now, where one evaluation is a noisy draw.", (),
       S("scalar", "set", "value", where={"name": HELDOUT_SCALARS}, finite_only=True, running="mean", skip=1,
         last=HELDOUT_RECENT)),
    _m("rlobs_grader_audit_gap", "gauge", "1",
       "The training reward's excess over an audit grader (an exact check) on the same training samples, last "
       "graded batch (scalar rlobs/grader_audit_gap, or trainer_ref's grader_audit_gap): a shaped reward's partial credit shrinks as the "
       "policy learns, a loophole's grows.", (),
       S("scalar", "set", "value", where={"name": AUDIT_SCALARS}, finite_only=True, absent_until_set=True)),
    _m("rlobs_policy_update_kl", "gauge", "1",
       "How far the last optimiser step moved the policy: KL(before || after) per token on the step's re-scored "
       "samples (k3; weighted by p_before / p_behaviour when an older policy sampled them).", (),
       S("train_step", "set", "policy_kl", finite_only=True, absent_until_set=True)),
    # --- the doctor's verdict, live (rlobs.doctor.exporter: `rlobs doctor RUN --follow --metrics-port N`, component
    # "doctor"; not fed by events: the exporter sets them from each evaluation of the growing record) ---
    _m("rlobs_doctor_finding", "gauge", "1",
       "1 for each finding of the doctor's last evaluation of the run (rule id, severity); a finding that no longer "
       "holds has no series.", ("rule", "severity")),
    _m("rlobs_doctor_finding_first_step", "gauge", "1",
       "The optimiser step at which each current finding of the doctor first held (its onset).", ("rule", "severity")),
    _m("rlobs_doctor_judged_steps", "gauge", "1",
       "The last optimiser step in the record when the doctor last judged it (compare with the trainer's "
       "rlobs_train_steps_total: how far behind the verdict is).", ()),
    _m("rlobs_doctor_last_evaluation_timestamp_seconds", "gauge", "timestamp_seconds",
       "Unix time the doctor's last successful evaluation of the run ended.", ()),
    _m("rlobs_doctor_started_timestamp_seconds", "gauge", "timestamp_seconds",
       "Unix time the doctor started serving its verdict on the run (RlobsDoctorBehind counts from it until the "
       "first evaluation succeeds).", ()),
    _m("rlobs_doctor_interval_seconds", "gauge", "seconds",
       "Seconds between the doctor's evaluations of the run (rlobs doctor --interval, rlobs observe --doctor-interval).",
       ()),
    _m("rlobs_doctor_evaluation_seconds", "gauge", "seconds",
       "Wall time of the doctor's last evaluation of the run (reading the record and every rule).", ()),
    _m("rlobs_doctor_evaluations_total", "counter", "1",
       "Evaluations of the growing record by the doctor, by outcome (ok; error: the record could not be read, the "
       "last verdict is kept).", ("outcome",), zero=(("ok",), ("error",))),
)

CATALOGUE: Mapping[str, MetricSpec] = {m.name: m for m in METRICS}
if len(CATALOGUE) != len(METRICS):
    raise ValueError("metric catalogue has duplicate names")


def metric(name: str) -> MetricSpec:
    try:
        return CATALOGUE[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; see rlobs.catalogue.CATALOGUE") from None


def exposed_names(spec: MetricSpec) -> tuple[str, ...]:
    """Series names Prometheus stores for a spec (histograms expand to _bucket/_sum/_count)."""
    if spec.type == "histogram":
        return (spec.name + "_bucket", spec.name + "_sum", spec.name + "_count")
    return (spec.name,)


def all_exposed_names() -> frozenset[str]:
    return frozenset(n for m in METRICS for n in exposed_names(m))


def by_kind() -> dict[str, list[MetricSpec]]:
    out: dict[str, list[MetricSpec]] = {}
    for m in METRICS:
        if m.source is not None:
            out.setdefault(m.source.kind, []).append(m)
    return out
