"""Model-side boards: policy health and graders, plus the catalogue explorer.

The explorer is generated from ``rlobs.catalogue`` alone: one panel per metric, one row per event
kind, so a metric appended to the catalogue shows up on a dashboard without touching this file.
"""

from __future__ import annotations

from rlobs.catalogue import METRICS, MetricSpec
from rlobs.dashboards import model as m
from rlobs.dashboards import selectors as s
from rlobs.dashboards.alerts import T
from rlobs.dashboards.model import Annotation, Board, Query, Row, q, ts

D = s.DASHBOARD


def _p(quant: float, hist: str, by: tuple[str, ...] = (), **labels: s.Matcher) -> Query:
    legend = f"p{int(quant * 100)}" + "".join(f" {{{{{b}}}}}" for b in by)
    return q(s.quantile(quant, hist, D, by, **labels), legend)


def _cumulative(title: str, description: str, *metrics: str) -> m.Panel:
    return ts(title, m.COUNT, description,
              *(q(s.gauge(name, D, "sum", ("component",)), f"{name.removeprefix('rlobs_')[:-6]} {{{{component}}}}")
                for name in metrics))


def _marker(name: str, metric: str, color: str) -> Annotation:
    scope = s.DASHBOARD.with_window("1m")
    return Annotation(name, f"{s.agg('sum', s.new_or_increase(metric, scope))} > 0", color)


def policy_health() -> Board:
    gradient = Row("Gradient", (
        ts("Grad norm (pre-clip)", m.NUMBER,
           "Global gradient norm before clipping; red markers are detector spikes, purple non-finite steps.",
           q(s.gauge("rlobs_grad_norm", D, "max", ("component",)), "{{component}}"), width=12),
        ts("Grad-norm spike score", m.NUMBER, "Robust z-score of the last grad norm (spike detector input).",
           q(s.gauge("rlobs_grad_norm_spike_score", D, "max", ("component",)), "{{component}}"),
           thresholds=m.traffic_light(4, 6), width=12),
        _cumulative("Non-finite, spike and clipped steps (cumulative)", "Counts of flagged optimiser steps.",
                    "rlobs_grad_norm_nonfinite_total", "rlobs_grad_norm_spikes_total",
                    "rlobs_grad_clipped_steps_total"),
        ts("Loss and reward", m.NUMBER, "Training loss and mean reward of the last batch.",
           q(s.gauge("rlobs_train_loss", D), "loss"), q(s.gauge("rlobs_reward_mean", D), "reward")),
        ts("Optimiser step time", m.SECONDS, "Wall time of one optimiser step.",
           _p(0.5, "rlobs_train_step_seconds"), _p(0.95, "rlobs_train_step_seconds")),
    ))
    denominator = Row("Advantage denominator (check it before blaming the model)", (
        ts("Zero / near-zero std groups", m.PERCENT,
           "Groups with identical rewards (no signal) and with a tiny std (amplified advantages).",
           q(s.gauge("rlobs_advantage_zero_std_groups_ratio", D), "zero std"),
           q(s.gauge("rlobs_advantage_near_zero_std_groups_ratio", D), "near-zero std"), max=1),
        ts("Max |advantage|", m.NUMBER, f"Largest |advantage|; alert above {T.advantage_abs_max:g}.",
           q(s.gauge("rlobs_advantage_abs_max", D), "max |A|"),
           thresholds=m.traffic_light(5, T.advantage_abs_max)),
        ts("Group denominators", m.NUMBER, "Smallest and median per-group (std + eps) in the last batch.",
           q(s.gauge("rlobs_advantage_denominator_min", D, "min"), "min"),
           q(s.gauge("rlobs_advantage_denominator_p50", D, "min"), "median")),
        ts("Token denominator per rank", m.NUMBER,
           "Global token count each data-parallel rank divides the loss by; the lines must coincide.",
           q(s.gauge("rlobs_advantage_token_denominator", D, "max", ("run", "rank")), "{{run}} rank {{rank}}")),
        _cumulative("Denominator faults (cumulative)", "NaN/zero denominators and rank disagreements.",
                    "rlobs_advantage_nonfinite_denominators_total", "rlobs_advantage_rank_disagreements_total"),
    ))
    parity = Row("Train/serve parity", (
        ts("Mean and max |Δlogp|", m.NUMBER,
           "Per-token |logp_train - logp_gen|: mean < 0.005 healthy, > 0.01 a problem.",
           q(s.gauge("rlobs_parity_abs_logprob_diff_mean", D), "mean"),
           q(s.gauge("rlobs_parity_abs_logprob_diff_max", D), "max"),
           q(s.gauge("rlobs_parity_post_sync_abs_logprob_diff_mean", D), "mean, first batch after sync"),
           thresholds=m.traffic_light(0.005, T.parity_mean_abs_dlogp)),
        ts("KL k3 (generator || trainer)", m.NUMBER, "k3 estimator of the KL between the two sides.",
           q(s.gauge("rlobs_parity_kl_k3", D), "k3")),
        _cumulative("Config hash mismatches (cumulative)",
                    "Batches whose tokenizer / chat template / sampling hashes differ between the sides.",
                    "rlobs_parity_config_mismatches_total"),
    ))
    return Board("rlobs-policy-health", "rlobs / Policy health",
                 "Grad norm with spike markers, advantage denominators, zero-std share, max |advantage|, parity.",
                 (gradient, denominator, parity),
                 annotations=(_marker("Grad-norm spikes", "rlobs_grad_norm_spikes_total", "red"),
                              _marker("Non-finite grad norm", "rlobs_grad_norm_nonfinite_total", "purple"),
                              _marker("Declared incidents", "rlobs_incidents_total", "orange")))


def graders() -> Board:
    latency = Row("Latency", (
        ts("Latency quantiles by kind", m.SECONDS, "p50 / p95 / p99 latency of grader calls per grader kind.",
           *(_p(x, "rlobs_grader_latency_seconds", ("grader_kind",)) for x in (0.5, 0.95, 0.99)), width=12),
        ts("Queue wait p95 by kind", m.SECONDS, "Time calls wait before a grader picks them up.",
           _p(0.95, "rlobs_grader_queue_wait_seconds", ("grader_kind",)), width=12),
        ts("Calls by kind and outcome", m.PER_SECOND, "Grader calls per second by kind and outcome.",
           q(s.agg("sum", s.rate("rlobs_grader_calls_total", D), ("grader_kind", "outcome")),
             "{{grader_kind}} {{outcome}}"), stack=True, width=12),
        ts("Timeout share by kind", m.PERCENT, f"Share of calls that timed out (alert over {T.grader_timeout_ratio:g}).",
           q(s.share_where("rlobs_grader_calls_total", D, ("grader_kind",), outcome="timeout"), "{{grader_kind}}"),
           width=12),
    ))
    stuck = Row("Stuck calls and the trainer's wait", (
        ts("In-flight calls by kind", m.COUNT, "Grader calls in flight.",
           q(s.gauge("rlobs_grader_inflight_calls", D, "sum", ("grader_kind",)), "{{grader_kind}}")),
        ts("Overdue calls by kind", m.COUNT, "Calls in flight past their deadline: a hung grader.",
           q(s.gauge("rlobs_grader_overdue_calls", D, "sum", ("grader_kind",)), "{{grader_kind}}"),
           thresholds=m.GREEN_AT_ZERO),
        ts("Oldest in-flight call", m.SECONDS, "Age of the oldest call still running, per kind.",
           q(s.gauge("rlobs_grader_oldest_inflight_seconds", D, "max", ("grader_kind",)), "{{grader_kind}}")),
        ts("Trainer wait share", m.PERCENT,
           "Share of trainer wall time spent waiting on rewards (graders) and on data overall.",
           q(s.agg("sum", s.rate("rlobs_trainer_reward_wait_seconds_total", D)), "waiting on rewards"),
           q(s.agg("sum", s.rate("rlobs_trainer_data_wait_seconds_total", D)), "waiting on data"), max=1),
    ))
    return Board("rlobs-graders", "rlobs / Graders",
                 "Grader latency quantiles per kind, timeouts, stuck calls and the trainer's wait on rewards.",
                 (latency, stuck))


def _explorer_query(spec: MetricSpec) -> tuple[str, Query]:
    labels = spec.labels
    legend = " ".join(f"{{{{{x}}}}}" for x in ("component", *labels))
    if spec.type == "histogram":
        return m.unit_of(spec.name), _p(0.95, spec.name, ("component", *labels))
    if spec.type == "counter":
        # seconds per second is a share of wall time; tokens and bytes keep their unit per second
        unit = {"seconds": m.PERCENT, "tokens": m.TOKENS_PER_SECOND, "bytes": m.BYTES_PER_SECOND}.get(
            spec.unit, m.PER_SECOND)
        return unit, q(s.agg("sum", s.rate(spec.name, D), ("component", *labels)), legend)
    return m.unit_of(spec.name), q(s.gauge(spec.name, D, "max", ("component", *labels)), legend)


def explorer() -> Board:
    rows: dict[str, list[m.Panel]] = {}
    for spec in METRICS:
        unit, query = _explorer_query(spec)
        what = {"histogram": "p95 of", "counter": "rate of", "gauge": "max of"}[spec.type]
        panel = ts(spec.name, unit, f"{what} {spec.name}: {spec.help}", query, width=8, height=7)
        row = spec.source.kind if spec.source else "doctor" if spec.name.startswith("rlobs_doctor_") else "recorder"
        rows.setdefault(row, []).append(panel)
    return Board("rlobs-explorer", "rlobs / Metric explorer",
                 "Every metric of the rlobs catalogue, one panel each, grouped by the event kind that feeds it.",
                 tuple(Row(kind, tuple(panels)) for kind, panels in rows.items()))
