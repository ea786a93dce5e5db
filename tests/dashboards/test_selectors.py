from __future__ import annotations

import pytest

from rlobs.catalogue import METRICS, all_exposed_names
from rlobs.dashboards import selectors as s


def test_series_applies_the_scope_and_checks_labels():
    assert s.series("rlobs_grader_calls_total", s.DASHBOARD, outcome="timeout") == \
        'rlobs_grader_calls_total{run=~"$run",component=~"$component",outcome="timeout"}'
    assert s.series("rlobs_grader_calls_total", s.ALERT, outcome=("=~", "a|b")) == \
        'rlobs_grader_calls_total{outcome=~"a|b"}'
    assert s.series("rlobs_weight_sync_boundary_seconds_bucket", s.ALERT, le="1") == \
        'rlobs_weight_sync_boundary_seconds_bucket{le="1"}'


@pytest.mark.parametrize("name", ["rlobs_nope_total", "rlobs_grader_latency_seconds", "rlobs_train_loss_bucket"])
def test_unknown_or_ambiguous_series_are_rejected_at_build_time(name):
    with pytest.raises(ValueError):
        s.series(name, s.ALERT)


def test_unknown_labels_and_operators_are_rejected():
    with pytest.raises(ValueError, match="no label 'boundary'"):
        s.series("rlobs_grader_calls_total", s.ALERT, boundary="load")
    with pytest.raises(ValueError, match="le"):
        s.series("rlobs_weight_sync_boundary_seconds_sum", s.ALERT, le="1")
    with pytest.raises(ValueError, match="operator"):
        s.series("rlobs_grader_calls_total", s.ALERT, outcome=("==", "ok"))


def test_query_shapes():
    assert s.rate("rlobs_train_steps_total", s.DASHBOARD) == \
        'rate(rlobs_train_steps_total{run=~"$run",component=~"$component"}[$__rate_interval])'
    assert s.quantile(0.95, "rlobs_grader_latency_seconds", s.ALERT, ("grader_kind",)) == \
        "histogram_quantile(0.95, sum by (le, grader_kind) (rate(rlobs_grader_latency_seconds_bucket[5m])))"
    x = "rlobs_grad_norm_nonfinite_total"
    assert s.new_or_increase(x, s.ALERT) == f"(({x} unless {x} offset 5m) or increase({x}[5m]))"


def test_metric_names_finds_series_and_ignores_functions_keywords_labels_and_numbers():
    expr = ('time() - max by (component, run) (max_over_time(rlobs_heartbeat_timestamp_seconds{run=~"$run",'
            'le="1e-3"}[15m])) > 1e-3 and on(run) ALERTS{alertstate="firing"} unless rlobs_train_loss offset 5m')
    assert s.metric_names(expr) == {"rlobs_heartbeat_timestamp_seconds", "ALERTS", "rlobs_train_loss"}
    assert s.metric_names("sum(rate(rlobs_nope_total[5m])) / bool 2") == {"rlobs_nope_total"}


def test_every_catalogue_series_is_selectable():
    for name in all_exposed_names():
        assert s.metric_names(s.series(name, s.DASHBOARD)) == {name}
    assert len(all_exposed_names()) >= len(METRICS)


def test_substitute_longest_variable_first():
    assert s.substitute('x{run=~"$run"}[$__rate_interval]', {"run": "r1", "__rate_interval": "1m"}) == \
        'x{run=~"r1"}[1m]'
