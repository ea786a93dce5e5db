"""The rlobs event schema: one envelope and typed event kinds, versioned.

Every event has the envelope fields (``ENVELOPE``) plus the fields of its kind. Kinds are data:
``KINDS[name]`` lists typed fields with a one-line doc each; the run record stores one columnar
stream per kind and process, and DuckDB exposes one view per kind.

Types are written as short strings (``int64``, ``float64``, ``string``, ``bool``, ``int32``,
``list<float32>``) so that this module imports nothing heavy; ``arrow_schema(kind)`` maps them to
pyarrow lazily.

Versioning: ``SCHEMA_VERSION = "MAJOR.MINOR"``. A minor bump only *adds* kinds or nullable fields:
older readers ignore what they do not know and newer readers see nulls for what old records lack.
A major bump changes or removes something; a reader refuses a record whose major version it does
not know (``rlobs.store.UnsupportedSchemaVersion``) and ``MIGRATIONS`` documents how to convert.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

SCHEMA_VERSION = "1.6"  # 1.6: staleness.max_bounded_staleness; 1.5: train_step.policy_kl; 1.4: staleness.is_correction_cap; 1.3: weight_sync.path; 1.2: parity.mean_abs_dprob / max_abs_dprob, kind rollout_summary (importers)
SCHEMA_MAJOR = 1

# Phases in which a trainer takes no optimiser step on purpose (a held-out evaluation, a checkpoint save, the drain
# of in-flight generation before one), as the heartbeat names them -> as the phase event names them. A trainer wraps
# them in ``probes.phase``; the no-progress alert gives a pause its own allowance instead of reading it as a stall.
PAUSE_PHASES: Mapping[str, str] = {"eval": "evaluation", "checkpoint": "checkpoint", "drain": "drain"}

# Documented migrations between major versions (none yet: 1 is the first).
MIGRATIONS: dict[tuple[int, int], str] = {}

_TYPES = ("int32", "int64", "float64", "float32", "string", "bool", "list<float32>", "list<int32>")


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: str
    doc: str

    def __post_init__(self) -> None:
        if self.type not in _TYPES:
            raise ValueError(f"field {self.name!r}: unknown type {self.type!r}; valid: {', '.join(_TYPES)}")
        if not self.name.isidentifier():
            raise ValueError(f"field name {self.name!r} is not an identifier")


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    doc: str
    fields: tuple[Field, ...]

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


def F(name: str, type_: str, doc: str) -> Field:
    return Field(name, type_, doc)


# Envelope: present on every event. ``run_id``, ``process``, ``component`` and ``rank`` are constant
# per writer; the others are captured when the event is emitted.
ENVELOPE: tuple[Field, ...] = (
    F("ts_ns", "int64", "wall-clock time of the event, ns since the Unix epoch"),
    F("mono_ns", "int64", "monotonic clock of the emitting process, ns (orders events within a process)"),
    F("run_id", "string", "run identifier (from the run manifest)"),
    F("process", "string", "emitting process: component-rank-host-pid-start"),
    F("component", "string", "logical component: driver, trainer, generator, grader, buffer, ..."),
    F("rank", "int32", "rank of the process within its component (data-parallel rank for the trainer)"),
    F("step", "int64", "trainer step the event belongs to (null when not tied to a step)"),
    F("policy_version", "int64", "policy version current in the emitting process when emitted"),
    F("trace_id", "string", "OpenTelemetry trace id (32 hex) of the enclosing span, if any"),
    F("span_id", "string", "OpenTelemetry span id (16 hex) of the enclosing span, if any"),
)
ENVELOPE_NAMES = tuple(f.name for f in ENVELOPE)
# Envelope fields a caller may set per event (the others are filled by the recorder).
ENVELOPE_OVERRIDABLE = ("step", "policy_version")

_KIND_LIST: tuple[Kind, ...] = (
    Kind("rollout", "one completion produced by a generator", (
        F("sample_id", "string", "unique sample id (stable across retries)"),
        F("group_id", "string", "GRPO group (prompt instance) the sample belongs to"),
        F("prompt_id", "string", "dataset prompt id"),
        F("dispatch_version", "int64", "policy version when the request was dispatched"),
        F("min_token_version", "int64", "lowest policy version that produced any of its tokens"),
        F("max_token_version", "int64", "highest policy version that produced any of its tokens"),
        F("prompt_tokens", "int32", "prompt length in tokens"),
        F("completion_tokens", "int32", "completion length in tokens"),
        F("finish_reason", "string", "stop | length | abort"),
        F("gen_seconds", "float64", "wall time from dispatch to completion"),
        F("prompt", "string", "prompt text (optional)"),
        F("completion", "string", "completion text (optional)"),
        F("logprobs", "list<float32>", "generator log-prob of each sampled token (optional)"),
    )),
    Kind("grader_call", "one reward computation", (
        F("sample_id", "string", "sample graded"),
        F("grader_kind", "string", "exact | rule | judge | code | ..."),
        F("queue_wait_s", "float64", "seconds between submission and start"),
        F("latency_s", "float64", "seconds the grader ran"),
        F("outcome", "string", "ok | timeout | error"),
        F("reward", "float64", "reward returned (null unless ok)"),
        F("error", "string", "error message when outcome is not ok"),
    )),
    Kind("grader_inflight", "grader watchdog sample", (
        F("grader_kind", "string", "grader kind"),
        F("in_flight", "int64", "calls in flight"),
        F("overdue", "int64", "calls in flight past the deadline"),
        F("oldest_age_s", "float64", "age of the oldest call in flight"),
        F("deadline_s", "float64", "deadline used"),
    )),
    Kind("train_step", "one optimiser step", (
        F("loss", "float64", "training loss"),
        F("grad_norm", "float64", "global gradient norm before clipping"),
        F("grad_norm_clipped", "float64", "global gradient norm after clipping"),
        F("clipped", "bool", "whether clipping changed the gradient"),
        F("nonfinite", "bool", "grad norm is NaN or Inf"),
        F("spike", "bool", "spike detector fired on this step"),
        F("spike_score", "float64", "robust z-score of the grad norm"),
        F("lr", "float64", "learning rate"),
        F("samples", "int64", "samples in the step"),
        F("tokens", "int64", "loss tokens in the step"),
        F("step_seconds", "float64", "wall time of the step"),
        F("data_wait_s", "float64", "seconds the trainer waited for a batch (rewards included)"),
        F("reward_wait_s", "float64", "seconds of data_wait_s spent waiting on graders"),
        F("reward_mean", "float64", "mean reward of the batch"),
        F("reward_std", "float64", "std of rewards in the batch"),
        F("kl", "float64", "KL to reference (if used)"),
        F("entropy", "float64", "mean token entropy"),
        F("policy_kl", "float64", "KL(policy before || after one optimiser update: the step's first when it takes "
                                  "several) per token, on the step's re-scored samples (importance-weighted when stale)"),
        F("detail", "string", "JSON: per-parameter-group norms and ids of samples/groups at a spike"),
    )),
    Kind("advantage", "advantage-denominator health of one step (per rank)", (
        F("groups", "int64", "groups in the batch"),
        F("zero_std_groups", "int64", "groups whose rewards are all equal (std == 0)"),
        F("near_zero_std_groups", "int64", "groups with 0 < std < threshold"),
        F("near_zero_threshold", "float64", "threshold used for near-zero std"),
        F("zero_std_ratio", "float64", "zero_std_groups / groups"),
        F("near_zero_std_ratio", "float64", "near_zero_std_groups / groups"),
        F("max_abs_advantage", "float64", "max |advantage| in the batch"),
        F("denom_min", "float64", "smallest per-group denominator (std + eps)"),
        F("denom_p50", "float64", "median per-group denominator"),
        F("denom_max", "float64", "largest per-group denominator"),
        F("nonfinite_denominators", "int64", "NaN / Inf / zero denominators"),
        F("token_denominator", "float64", "global token count this rank divided the loss by"),
        F("ranks_agree", "bool", "all data-parallel ranks used the same token denominator"),
        F("rank_denominators", "string", "JSON list of every rank's token denominator"),
    )),
    Kind("staleness", "off-policy health of one consumed batch", (
        F("samples", "int64", "samples consumed"),
        F("max_staleness", "int64", "max trainer version - dispatch version"),
        F("mean_staleness", "float64", "mean staleness"),
        F("histogram", "string", "JSON {staleness: count}"),
        F("mean_age_s", "float64", "mean sample age at consumption"),
        F("max_age_s", "float64", "max sample age at consumption"),
        F("is_ratio_mean", "float64", "mean importance ratio"),
        F("is_ratio_max", "float64", "max importance ratio"),
        F("is_clipped_ratio", "float64", "share of tokens whose importance ratio was truncated"),
        F("ess_ratio", "float64", "effective sample size / tokens"),
        F("is_correction_cap", "float64", "importance-ratio cap the loss applies (0: samples used uncorrected)"),
        F("max_bounded_staleness", "int64", "max staleness on the basis the consumer's bound is checked on, where that "
          "is not dispatch (trainer_ref --staleness-basis completion: trainer version - the group's newest token "
          "version); absent: the bound is on max_staleness"),
    )),
    Kind("weight_sync", "one boundary span of one weight sync", (
        F("version", "int64", "policy version being synced"),
        F("boundary", "string", "dump | staging | transfer | load | cache_reset | end_to_end"),
        F("start_ns", "int64", "wall-clock start, ns"),
        F("duration_s", "float64", "duration"),
        F("bytes", "int64", "bytes handled"),
        F("outcome", "string", "ok | error | mismatch | torn | skipped"),
        F("tensors_expected", "int64", "tensors expected"),
        F("tensors_present", "int64", "tensors present / loaded"),
        F("fingerprint", "string", "digest over all per-tensor fingerprints"),
        F("fingerprint_match", "bool", "load fingerprint equals dump fingerprint"),
        F("mismatched_tensors", "string", "JSON list of tensor names whose fingerprints differ"),
        F("lock_wait_s", "float64", "staging: seconds waiting for the lock"),
        F("lock_hold_s", "float64", "staging: seconds holding the lock"),
        F("seq_before", "int64", "staging: sequence number before the read"),
        F("seq_after", "int64", "staging: sequence number after the read"),
        F("torn", "bool", "staging: sequence changed during the read"),
        F("bandwidth_bps", "float64", "bytes / duration of the boundary (every boundary that moved bytes)"),
        F("path", "string", "weight-sync path taken: shm | object_store | cuda_ipc | nccl"),
        F("retries", "int64", "transfer: retries"),
        F("mem_hwm_bytes", "int64", "load: memory high-water mark"),
        F("reset_requested", "bool", "cache_reset: reset requested"),
        F("reset_confirmed", "bool", "cache_reset: engine confirmed the reset"),
        F("inflight_aborted", "int64", "cache_reset: in-flight requests aborted"),
        F("inflight_resumed", "int64", "cache_reset: in-flight requests resumed"),
        F("error", "string", "error message"),
        F("missing_tensors", "string", "dump/load: JSON list of expected tensor names that are absent"),
    )),
    Kind("queue", "depth sample of a bounded queue", (
        F("queue", "string", "queue name"),
        F("depth", "int64", "items in the queue"),
        F("capacity", "int64", "bound"),
        F("oldest_age_s", "float64", "age of the oldest item"),
    )),
    Kind("throughput", "throughput sample of one side over a window", (
        F("window_s", "float64", "window length"),
        F("samples", "int64", "samples produced / consumed in the window"),
        F("tokens", "int64", "tokens in the window"),
        F("samples_per_s", "float64", "samples / window"),
        F("tokens_per_s", "float64", "tokens / window"),
        F("effective_samples_per_s", "float64", "generator: samples later consumed / window"),
        F("idle_ratio", "float64", "share of the window the side was idle"),
        F("sync_bubble_s", "float64", "seconds spent blocked by weight sync"),
        F("predicted_staleness", "float64", "equilibrium staleness the rates predict"),
    )),
    Kind("parity", "train/serve parity of one step", (
        F("tokens", "int64", "tokens compared"),
        F("mean_abs_dlogp", "float64", "mean |logp_train - logp_gen|"),
        F("max_abs_dlogp", "float64", "max |logp_train - logp_gen|"),
        F("kl_k1", "float64", "KL estimator k1 (gen || train)"),
        F("kl_k2", "float64", "KL estimator k2"),
        F("kl_k3", "float64", "KL estimator k3"),
        F("first_after_sync", "bool", "first batch after a weight sync"),
        F("hashes_match", "bool", "tokenizer / chat template / sampling hashes agree"),
        F("mismatched_hashes", "string", "JSON list of the hashes that differ"),
        F("mean_abs_dprob", "float64", "mean |p_train - p_gen| per token (probability, not log-prob: verl's rollout_probs_diff)"),
        F("max_abs_dprob", "float64", "max |p_train - p_gen| per token (probability)"),
    )),
    Kind("parity_sample", "per-sample train/serve log-probs", (
        F("sample_id", "string", "sample"),
        F("mean_abs_dlogp", "float64", "mean |dlogp| over its tokens"),
        F("max_abs_dlogp", "float64", "max |dlogp|"),
        F("train_logprobs", "list<float32>", "trainer log-prob of each completion token"),
    )),
    Kind("heartbeat", "liveness of a component", (
        F("phase", "string", "what the component is doing: generate, grade, train, sync, wait, idle; "
                             "eval, checkpoint or drain: a pause (PAUSE_PHASES)"),
        F("detail", "string", "free text"),
    )),
    Kind("phase", "one completed phase of a component (cost accounting)", (
        F("phase", "string", "generation | grading | training | sync | wait | evaluation | checkpoint | drain"),
        F("seconds", "float64", "duration"),
        F("tokens", "int64", "tokens handled"),
    )),
    Kind("ledger", "one transition of a sample in its life", (
        F("sample_id", "string", "sample"),
        F("group_id", "string", "group"),
        F("state", "string", "generated | graded | consumed | dropped"),
        F("reason", "string", "why dropped: stale | ttl | queue_full | grader_error | aborted | truncated | zero_advantage"),
        F("tokens", "int64", "completion tokens"),
        F("staleness", "int64", "consumed: trainer version - dispatch version"),
        F("age_s", "float64", "consumed/dropped: seconds since generation"),
        F("duplicate", "bool", "this sample already made this transition (or already ended): exactly-once violated"),
    )),
    Kind("goodput", "token accounting of one step by category", (
        F("category", "string", "effective | stale | expired | zero_advantage | truncated | grader_error | aborted"),
        F("tokens", "int64", "tokens"),
        F("samples", "int64", "samples"),
        F("effective_ratio", "float64", "category effective only: effective tokens / all tokens accounted this step"),
    )),
    Kind("manifest", "what one process runs with", (
        F("host", "string", "host name"),
        F("pid", "int64", "process id"),
        F("config", "string", "JSON config"),
        F("versions", "string", "JSON {library: version}"),
        F("tokenizer_hash", "string", "hash of the tokenizer"),
        F("chat_template_hash", "string", "hash of the chat template"),
        F("sampling_hash", "string", "hash of the sampling parameters"),
    )),
    Kind("span", "an OpenTelemetry-style span (steps, syncs, grader batches)", (
        F("name", "string", "span name"),
        F("parent_span_id", "string", "parent span id (16 hex), null for a root"),
        F("start_ns", "int64", "wall-clock start, ns"),
        F("end_ns", "int64", "wall-clock end, ns"),
        F("status", "string", "ok | error"),
        F("attributes", "string", "JSON attributes"),
    )),
    Kind("telemetry", "the recorder's own health", (
        F("reason", "string", "queue_full | sink_error | sink_backlog | invalid_event | unknown_kind | otlp_export"),
        F("sink", "string", "sink concerned"),
        F("dropped", "int64", "events dropped since the previous report"),
        F("queue_depth", "int64", "recorder queue depth"),
    )),
    Kind("incident", "a declared incident: injected fault, operator note", (
        F("fault", "string", "fault name"),
        F("onset_step", "int64", "first step affected"),
        F("magnitude", "float64", "magnitude"),
        F("detail", "string", "free text / JSON"),
    )),
    Kind("rollout_summary", "per-step aggregate of the completions (when only aggregates are known: importers)", (
        F("samples", "int64", "completions in the step"),
        F("completion_tokens_mean", "float64", "mean completion length in tokens"),
        F("completion_tokens_min", "float64", "shortest completion in tokens"),
        F("completion_tokens_max", "float64", "longest completion in tokens"),
        F("prompt_tokens_mean", "float64", "mean prompt length in tokens"),
        F("truncated_ratio", "float64", "share of completions cut at the length limit"),
        F("aborted_ratio", "float64", "share of completions aborted (empty)"),
    )),
    Kind("scalar", "any named number (importers keep unmapped metrics here)", (
        F("name", "string", "metric name as logged"),
        F("value", "float64", "value"),
        F("source", "string", "where it came from (framework, file)"),
    )),
)

KINDS: Mapping[str, Kind] = {k.name: k for k in _KIND_LIST}


def _check() -> None:
    for kind in _KIND_LIST:
        seen = set(ENVELOPE_NAMES)
        for f in kind.fields:
            if f.name in seen:
                raise ValueError(f"kind {kind.name!r}: field {f.name!r} repeats an envelope or earlier field")
            seen.add(f.name)


_check()


def kind(name: str) -> Kind:
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"unknown event kind {name!r}; valid: {', '.join(sorted(KINDS))}") from None


def all_fields(kind_name: str) -> tuple[Field, ...]:
    return ENVELOPE + kind(kind_name).fields


def parse_version(version: str) -> tuple[int, int]:
    try:
        major, minor = (int(p) for p in str(version).split("."))
    except ValueError:
        raise ValueError(f"malformed schema version {version!r}; expected MAJOR.MINOR") from None
    return major, minor


_ARROW_CACHE: dict[str, Any] = {}


def arrow_type(type_: str) -> Any:
    import pyarrow as pa

    return {
        "int32": pa.int32(), "int64": pa.int64(), "float64": pa.float64(), "float32": pa.float32(),
        "string": pa.string(), "bool": pa.bool_(), "list<float32>": pa.list_(pa.float32()),
        "list<int32>": pa.list_(pa.int32()),
    }[type_]


def arrow_schema(kind_name: str) -> Any:
    """pyarrow schema of one kind (envelope first), with the schema version in its metadata."""
    cached = _ARROW_CACHE.get(kind_name)
    if cached is None:
        import pyarrow as pa

        cached = pa.schema(
            [pa.field(f.name, arrow_type(f.type)) for f in all_fields(kind_name)],
            metadata={"rlobs.schema_version": SCHEMA_VERSION, "rlobs.kind": kind_name},
        )
        _ARROW_CACHE[kind_name] = cached
    return cached
