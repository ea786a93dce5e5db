"""Operational boards: the on-call overview, weight sync, and staleness & throughput.

Each function returns a ``Board`` (plain data). Queries come only from ``rlobs.dashboards.selectors``
with the ``DASHBOARD`` scope (``$run``/``$component`` filters), so every metric name is checked
against the catalogue when the board is built. Thresholds shared with alerts come from
``rlobs.dashboards.alerts.T``.
"""

from __future__ import annotations

from rlobs.dashboards import model as m
from rlobs.dashboards import selectors as s
from rlobs.dashboards.alerts import T, trainer_wait_share
from rlobs.dashboards.model import Board, Query, Row, q, stat, ts

D = s.DASHBOARD
D1H = D.with_window("1h")


def _p(quant: float, hist: str, by: tuple[str, ...] = (), **labels: s.Matcher) -> Query:
    legend = f"p{int(quant * 100)}" + "".join(f" {{{{{b}}}}}" for b in by)
    return q(s.quantile(quant, hist, D, by, **labels), legend)


def overview() -> Board:
    findings = Row("Findings and run progress", (
        m.Panel("Active alerts (current findings)", "table", m.COUNT,
                (q(s.agg("sum", s.alerts_series(D), ("alertname", "alertstate", "severity", "component", "runbook")),
                   format="table", instant=True),),
                "Alerts pending or firing for the selected runs; click the runbook cell for its page. Run "
                "`rlobs doctor RUN` for the full ranked diagnosis.", width=12, height=6,
                links=(("runbook", "{runbook_base}${__value.raw}.md"),)),
        stat("Optimiser steps", m.COUNT, "Optimiser steps taken in the selected runs.",
             q(s.gauge("rlobs_train_steps_total", D, "sum"))),
        stat("Steps per second", m.STEPS_PER_SECOND, "Trainer progress rate.",
             q(s.agg("sum", s.rate("rlobs_train_steps_total", D)))),
        stat("Policy version (trainer / served)", m.NUMBER,
             "Latest policy version in the trainer and the latest version whose weight sync finished end to end.",
             q(s.gauge("rlobs_policy_version", D), "trainer"), q(s.gauge("rlobs_weight_sync_version", D), "served")),
    ))
    doctor = Row("The doctor, live (rlobs doctor RUN --follow --metrics-port N)", (
        m.Panel("Doctor findings (onset step)", "table", m.COUNT,
                (q(s.gauge("rlobs_doctor_finding_first_step", D, "max", ("run", "rule", "severity")),
                   format="table", instant=True),),
                "Every finding of the doctor's last evaluation of each run that `rlobs doctor RUN --follow "
                "--metrics-port N` watches, with the step it first held; precursor-* rows page as "
                "RlobsDoctorPrecursor. Click the rule for its runbook.", width=12, height=6,
                links=(("rule", "{runbook_base}${__value.raw}.md"),)),
        ts("Doctor: last judged step vs the trainer's steps", m.COUNT,
           "The record's last optimiser step at the doctor's last evaluation, against the trainer's step count: the "
           "gap is how far behind the live verdict is (one --interval plus the evaluation's time).",
           q(s.gauge("rlobs_doctor_judged_steps", D, "max", ("run",)), "judged {{run}}"),
           q(s.gauge("rlobs_train_steps_total", D, "max", ("run",)), "trainer {{run}}"), width=6, height=6),
        ts("Doctor: evaluation time", m.SECONDS,
           "Wall time of the doctor's last evaluation of each run (reading the record, every rule); the alert "
           "lags a step by at most this plus --interval.",
           q(s.gauge("rlobs_doctor_evaluation_seconds", D, "max", ("run",)), "{{run}}"), width=6, height=6),
    ))
    processes = Row("Processes and run state", (
        m.Panel("Processes up (per target)", "table", m.NUMBER,
                (q(s.agg("max", s.up(D), ("run", "component", "rank", "instance")), format="table", instant=True),),
                "Prometheus' `up` of every process of the selected runs (1 answering, 0 down: died, stopped or "
                "hung). A process that ended cleanly is no longer listed; a dead one stays about 2 minutes "
                f"(alert RlobsProcessDown after {T.process_down_for}).", width=12, height=6),
        stat("Run state: processes up / down", m.COUNT,
             "Processes of the selected runs answering scrapes, and processes down. Both empty: the run has ended "
             "(every process removed its target at a clean exit).",
             q(f"sum by (run) ({s.up(D)})", "up {{run}}"), q(f"sum by (run) (1 - {s.up(D)})", "down {{run}}"),
             width=6, height=6),
        stat("Seconds since the last optimiser step", m.SECONDS,
             "Wall time since the trainer's last optimiser step (alert RlobsNoProgress after "
             f"max({T.no_progress_floor_seconds:g} s, {T.no_progress_step_multiple:g}x the step interval), counted "
             "from the end of a declared pause if later; during an evaluation, checkpoint save or drain it allows "
             f"{T.no_progress_pause_multiple:g}x that pause's mean more, at least "
             f"{T.no_progress_pause_floor_seconds:g} s: this number grows through a pause without a page).",
             q(f"time() - {s.gauge('rlobs_train_step_last_timestamp_seconds', D, 'max', ('run',))}", "{{run}}"),
             width=6, height=6,
             thresholds=m.traffic_light(T.no_progress_floor_seconds / 2, T.no_progress_floor_seconds)),
    ))
    families = Row("Probe families at a glance", (
        stat("Max staleness", m.unit_of("rlobs_staleness_max_versions"),
             "Max policy-version staleness in the last consumed batch, counted as the alert counts it: on the basis "
             "the run's bound is checked on (from the group's newest token version under trainer_ref's completion "
             f"basis), else from dispatch (alert bound {T.staleness_max_versions}).", q(_bounded_staleness()),
             thresholds=m.traffic_light(T.staleness_max_versions, T.staleness_max_versions + 1)),
        stat("Weight-sync failures (1h)", m.COUNT,
             "Boundary spans that ended in error, torn read or fingerprint mismatch in the last hour.",
             q(s.agg("sum", s.new_or_increase("rlobs_weight_sync_boundaries_total", D1H,
                                               outcome=("=~", "error|torn|mismatch"))) + " or vector(0)"),
             thresholds=m.GREEN_AT_ZERO),
        stat("Non-finite grad norms (1h)", m.COUNT, "Optimiser steps with a NaN/Inf gradient norm in the last hour.",
             q(s.agg("sum", s.new_or_increase("rlobs_grad_norm_nonfinite_total", D1H))), thresholds=m.GREEN_AT_ZERO),
        stat("Max |advantage|", m.unit_of("rlobs_advantage_abs_max"),
             "Largest |advantage| in the last batch; near-zero group std inflates it.",
             q(s.gauge("rlobs_advantage_abs_max", D)), thresholds=m.traffic_light(5, T.advantage_abs_max)),
        stat("Overdue grader calls", m.COUNT, "Grader calls in flight past their deadline (hung grader).",
             q(s.gauge("rlobs_grader_overdue_calls", D, "sum")), thresholds=m.GREEN_AT_ZERO),
        stat("Trainer data-wait share", m.PERCENT, "Share of trainer time spent waiting for batches, not stepping.",
             q(trainer_wait_share(D)),
             thresholds=m.traffic_light(0.2, T.trainer_data_wait_ratio)),
        stat("Parity mean |Δlogp|", m.NUMBER, "Mean |logp_train - logp_gen|: < 0.005 healthy, > 0.01 a problem.",
             q(s.gauge("rlobs_parity_abs_logprob_diff_mean", D)),
             thresholds=m.traffic_light(0.005, T.parity_mean_abs_dlogp)),
        stat("Telemetry drops (1h)", m.COUNT, "Events the recorder dropped in the last hour (incomplete telemetry).",
             q(s.agg("sum", s.new_or_increase("rlobs_telemetry_dropped_total", D1H))), thresholds=m.GREEN_AT_ZERO),
        stat("Effective token ratio", m.unit_of("rlobs_effective_token_ratio"),
             "Goodput: tokens that carried gradient signal over all tokens accounted in the last step.",
             q(s.gauge("rlobs_effective_token_ratio", D, "min"))),
        m.Panel("Heartbeat age by component", "bargauge", m.SECONDS,
                (q(f"time() - {s.gauge('rlobs_heartbeat_timestamp_seconds', D, 'max', ('component',))}",
                   "{{component}}"),),
                "Seconds since each component's last heartbeat (alert at "
                f"{T.heartbeat_silence_seconds:g} s).", width=8, height=5,
                thresholds=m.traffic_light(T.heartbeat_silence_seconds / 2, T.heartbeat_silence_seconds)),
    ))
    trends = Row("Trends", (
        ts("Throughput by component", m.SAMPLES_PER_SECOND, "Samples per second each side produces or consumes.",
           q(s.gauge("rlobs_throughput_samples_per_second", D, "sum", ("component",)), "{{component}}")),
        ts("Staleness", m.VERSIONS, "Max and mean staleness of consumed batches (from dispatch), and the max on "
           "the basis the run's bound is checked on where that is another (trainer_ref's completion basis).",
           q(s.gauge("rlobs_staleness_max_versions", D), "max"),
           q(s.gauge("rlobs_staleness_mean_versions", D), "mean"),
           q(s.gauge("rlobs_staleness_bounded_max_versions", D), "max, the bound's basis")),
        ts("Policy lag p95", m.SECONDS, "From optimiser step to the generator serving that version.",
           _p(0.95, "rlobs_weight_sync_policy_lag_seconds")),
    ))
    return Board("rlobs-overview", "rlobs / On-call overview",
                 "Health of every probe family at a glance, current alerts and run progress.",
                 (findings, doctor, processes, families, trends))


def weight_sync() -> Board:
    boundaries = Row("The five boundaries", (
        ts("Boundary durations (stacked)", m.SECONDS,
           "Mean duration of each sync boundary (dump, staging, transfer, load, cache_reset), stacked: "
           "the height is one sync.",
           q(s.histogram_mean("rlobs_weight_sync_boundary_seconds", D, ("boundary",), boundary=("!=", "end_to_end")),
             "{{boundary}}"), stack=True, width=12),
        ts("Policy lag (step to serving)", m.SECONDS, "End-to-end policy lag quantiles.",
           _p(0.5, "rlobs_weight_sync_policy_lag_seconds"), _p(0.95, "rlobs_weight_sync_policy_lag_seconds"),
           width=12),
        ts("Boundary outcomes", m.PER_SECOND, "Boundary spans per second by boundary and outcome.",
           q(s.agg("sum", s.rate("rlobs_weight_sync_boundaries_total", D), ("boundary", "outcome")),
             "{{boundary}} {{outcome}}"), width=12),
        ts("Versions: trainer vs served", m.NUMBER, "Trainer policy version and last version synced end to end.",
           q(s.gauge("rlobs_policy_version", D), "trainer"), q(s.gauge("rlobs_weight_sync_version", D), "served"),
           width=12),
    ))
    correctness = Row("Correctness", (
        ts("Fingerprint mismatches (cumulative)", m.COUNT, "Loads whose fingerprints differ from the dump.",
           q(s.gauge("rlobs_weight_sync_fingerprint_mismatches_total", D, "sum", ("component",)), "{{component}}")),
        ts("Torn staging reads (cumulative)", m.COUNT, "Staging-buffer reads torn by a concurrent write.",
           q(s.gauge("rlobs_weight_sync_torn_reads_total", D, "sum", ("component",)), "{{component}}")),
        ts("Cache resets not confirmed (cumulative)", m.COUNT,
           "Syncs whose KV/prefix-cache reset the engine did not confirm.",
           q(s.gauge("rlobs_weight_sync_cache_reset_unconfirmed_total", D, "sum", ("component",)), "{{component}}")),
    ))
    transfer = Row("Transfer and memory", (
        ts("Transfer bandwidth", m.unit_of("rlobs_weight_sync_bandwidth_bytes_per_second"),
           "Bandwidth of the last transfer; compare with the run's baseline.",
           q(s.gauge("rlobs_weight_sync_bandwidth_bytes_per_second", D, "max", ("component",)), "{{component}}")),
        ts("Bytes per boundary", m.BYTES_PER_SECOND, "Bytes handled per second by boundary.",
           q(s.agg("sum", s.rate("rlobs_weight_sync_bytes_total", D), ("boundary",)), "{{boundary}}")),
        ts("Staging lock wait p95", m.SECONDS, "Wait for the staging-buffer lock.",
           _p(0.95, "rlobs_weight_sync_lock_wait_seconds")),
        ts("Memory high-water at load", m.unit_of("rlobs_weight_sync_memory_high_water_bytes"),
           "Memory high-water mark of the generator at the last load.",
           q(s.gauge("rlobs_weight_sync_memory_high_water_bytes", D, "max", ("component",)), "{{component}}")),
    ))
    return Board("rlobs-weight-sync", "rlobs / Weight sync",
                 "The five weight-sync boundaries per sync: durations, outcomes, fingerprints, bandwidth, lag.",
                 (boundaries, correctness, transfer))


def _bounded_staleness() -> str:
    """Max staleness per run on the basis its bound is checked on (``rlobs_staleness_bounded_max_versions`` where
    the run exports it, else the dispatch gauge), the most over the runs shown: what ``RlobsStalenessOverBound``
    compares with its bound."""
    per_run = (f"{s.gauge('rlobs_staleness_bounded_max_versions', D, 'max', ('run',))} or "
               f"{s.gauge('rlobs_staleness_max_versions', D, 'max', ('run',))}")
    return f"max({per_run})"


def staleness_throughput() -> Board:
    staleness = Row("Staleness", (
        m.Panel("Staleness of consumed samples", "heatmap", m.VERSIONS,
                (q(s.heatmap_buckets("rlobs_sample_staleness_versions", D), "{{le}}", format="heatmap"),),
                "Histogram of trainer version - dispatch version at consumption, over time.", width=12),
        ts("Staleness: max, mean, predicted", m.VERSIONS,
           "Measured staleness (from dispatch), the max on the basis the run's bound is checked on where that is "
           "another (trainer_ref's completion basis: from the group's newest token version, what the alert reads) "
           "and the equilibrium the generator/trainer rates predict.",
           q(s.gauge("rlobs_staleness_max_versions", D), "max"), q(s.gauge("rlobs_staleness_mean_versions", D), "mean"),
           q(s.gauge("rlobs_staleness_bounded_max_versions", D), "max, the bound's basis"),
           q(s.gauge("rlobs_predicted_staleness_versions", D), "predicted"), width=12),
        ts("Sample age at consumption", m.SECONDS, "Age of consumed samples.",
           _p(0.5, "rlobs_sample_age_seconds"), _p(0.95, "rlobs_sample_age_seconds")),
        ts("Importance ratio", m.NUMBER, "Max and mean importance-sampling ratio of the last batch, and the cap the "
           "loss truncates it at (0: no correction, stale samples used as if on-policy).",
           q(s.gauge("rlobs_importance_ratio_max", D), "max"), q(s.gauge("rlobs_importance_ratio_mean", D), "mean"),
           q(s.gauge("rlobs_importance_correction_cap", D), "correction cap")),
        ts("IS clipping and effective sample size", m.PERCENT, "Share of clipped tokens and ESS over tokens.",
           q(s.gauge("rlobs_importance_clipped_ratio", D), "clipped"),
           q(s.gauge("rlobs_effective_sample_size_ratio", D, "min"), "ESS")),
    ))
    queues = Row("Drops and queues", (
        ts("Samples dropped by reason", m.PER_SECOND, "Dropped samples per second by reason (stale, ttl, ...).",
           q(s.agg("sum", s.rate("rlobs_samples_total", D, state="dropped"), ("reason",)), "{{reason}}")),
        ts("Sample ledger transitions", m.PER_SECOND, "Generated, graded, consumed and dropped per second.",
           q(s.agg("sum", s.rate("rlobs_samples_total", D), ("state",)), "{{state}}")),
        ts("Queue depth vs capacity", m.COUNT, "Items in each bounded queue and its bound.",
           q(s.gauge("rlobs_queue_depth", D, "max", ("queue",)), "{{queue}} depth"),
           q(s.gauge("rlobs_queue_capacity", D, "max", ("queue",)), "{{queue}} capacity")),
        ts("Oldest item age by queue", m.SECONDS, "Age of the oldest item waiting in each queue.",
           q(s.gauge("rlobs_queue_oldest_age_seconds", D, "max", ("queue",)), "{{queue}}")),
        ts("Repeated ledger transitions (cumulative)", m.COUNT,
           "Samples that made the same transition twice (exactly-once violated, e.g. a resume replaying samples).",
           q(s.gauge("rlobs_ledger_duplicate_transitions_total", D, "sum", ("state",)), "{{state}}")),
    ))
    throughput = Row("Throughput matching", (
        ts("Samples per second by component", m.SAMPLES_PER_SECOND, "Raw throughput of each side.",
           q(s.gauge("rlobs_throughput_samples_per_second", D, "sum", ("component",)), "{{component}}")),
        ts("Effective generator throughput", m.SAMPLES_PER_SECOND,
           "Generator samples per second later consumed, against trainer consumption.",
           q(s.gauge("rlobs_effective_throughput_samples_per_second", D, "sum", ("component",)),
             "{{component}} effective")),
        ts("Tokens per second by component", m.TOKENS_PER_SECOND, "Token throughput of each side.",
           q(s.gauge("rlobs_throughput_tokens_per_second", D, "sum", ("component",)), "{{component}}")),
        ts("Idle ratio by component", m.PERCENT, "Share of the last window each side was idle.",
           q(s.gauge("rlobs_idle_ratio", D, "max", ("component",)), "{{component}}"), max=1),
        ts("Goodput: tokens by fate", m.TOKENS_PER_SECOND, "Generated tokens per second by what became of them.",
           q(s.agg("sum", s.rate("rlobs_goodput_tokens_total", D), ("category",)), "{{category}}"), stack=True),
        ts("Weight-sync bubble share", m.PERCENT, "Share of wall time each side was blocked by weight sync.",
           q(s.agg("sum", s.rate("rlobs_sync_bubble_seconds_total", D), ("component",)), "{{component}}")),
        ts("Wall-time share by phase", m.PERCENT, "Seconds per second each component spends in each phase.",
           q(s.agg("sum", s.rate("rlobs_phase_seconds_total", D), ("component", "phase")), "{{component}} {{phase}}"),
           stack=True),
        ts("Rollout generation time", m.SECONDS, "Dispatch-to-completion time of rollouts.",
           _p(0.5, "rlobs_rollout_generation_seconds"), _p(0.95, "rlobs_rollout_generation_seconds")),
        ts("Completion length", m.TOKENS, "Completion length quantiles.",
           _p(0.5, "rlobs_rollout_completion_tokens"), _p(0.95, "rlobs_rollout_completion_tokens")),
        ts("Rollouts by finish reason", m.PER_SECOND, "Completions per second by finish reason.",
           q(s.agg("sum", s.rate("rlobs_rollouts_total", D), ("finish_reason",)), "{{finish_reason}}")),
    ))
    return Board("rlobs-staleness-throughput", "rlobs / Staleness & throughput",
                 "Staleness histogram, drops by reason, queues, idle ratios and each side's effective throughput.",
                 (staleness, queues, throughput))
