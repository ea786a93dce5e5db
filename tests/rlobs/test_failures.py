"""The failure table is the one source: alerts, doctor rules, runbooks and `rlobs explain` all agree with it."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from rlobs.cli import app
from rlobs.dashboards.alerts import RULES, T
from rlobs.doctor import registry
from rlobs.failures import FAILURES, explain
from rlobs.runbooks import data_dir


def test_every_alert_and_rule_has_one_row_and_nothing_else():
    alerts = {r.id: r for r in RULES}
    rules = registry()
    assert set(FAILURES) == set(alerts) | set(rules)
    for fid, f in FAILURES.items():
        assert f.alert == (fid in alerts), fid
        assert f.rule == (fid in rules), fid
        if f.alert:
            assert (alerts[fid].severity, alerts[fid].for_) == (f.severity, f.alert_for), fid
        if f.rule:  # the doctor rule runs with the table's numbers
            assert {k: rules[fid].thresholds[k] for k in f.thresholds} == dict(f.thresholds), fid
        assert (data_dir("runbooks") / f"{fid}.md").is_file(), fid


def test_alerts_and_doctor_use_the_same_numbers():
    rules = registry()
    # the two disagreements of the issue: zero-std share and heartbeat silence
    assert T.zero_std_groups_ratio == rules["advantage-zero-std-groups"].thresholds["ratio"] == 0.75
    assert T.heartbeat_silence_seconds == rules["heartbeat-lost"].thresholds["silence_s"] == 120.0
    zero = next(r for r in RULES if r.id == "advantage-zero-std-groups")
    assert re.search(r"\) > 0\.75\b", zero.expr)
    hb = next(r for r in RULES if r.id == "heartbeat-lost")
    assert re.search(r", 120\)\) and on \(run, component, rank, instance\)", hb.expr)  # the floor of its allowance
    assert T.staleness_max_versions == rules["staleness-over-bound"].thresholds["warn_versions"]
    assert T.advantage_abs_max == rules["advantage-denominator-collapse"].thresholds["max_abs_advantage"]
    assert T.grader_slow_ratio == rules["grader-slow"].thresholds["ratio"]
    assert T.parity_mean_abs_dlogp == rules["parity-drift"].thresholds["critical"]
    # the spike detector's numbers: probe default = doctor rule = table
    from rlobs.detect import SPIKE, SpikeDetector

    assert SpikeDetector().params() == {k: SPIKE[k] for k in SpikeDetector().params()}
    assert {k: rules["grad-norm-spike"].thresholds[k] for k in SPIKE} == SPIKE


def test_an_alert_that_drifts_from_the_table_is_refused():
    from rlobs.dashboards.alerts import AlertRule

    r = next(r for r in RULES if r.id == "heartbeat-lost")
    with pytest.raises(ValueError, match="failure table"):
        AlertRule(r.id, r.severity, r.expr, "5m", r.summary, r.description, r.case)


@pytest.mark.parametrize("fid", sorted(FAILURES))
def test_explain_prints_metric_panel_alert_rule_runbook(fid):
    res = CliRunner().invoke(app, ["explain", fid])
    assert res.exit_code == 0, res.output
    out = res.output
    steps = [out.index(f"{i}. ") for i in range(1, 6)]
    assert steps == sorted(steps)  # metric -> panel -> alert -> rule -> runbook, in that order
    e = explain(fid)
    assert f"runbooks/{fid}.md" in out
    if FAILURES[fid].alert:
        assert e["metrics"] and e["alert"]["name"] in out
        for m in e["metrics"]:
            assert m["help"], m  # every metric the alert reads is in the catalogue
    if FAILURES[fid].rule:
        assert f"rlobs doctor RUN --rule {fid}" in out
    assert len(e["panels"]) >= 2, fid


def test_explain_unknown_id_is_a_clear_error():
    res = CliRunner().invoke(app, ["explain", "no-such-failure"])
    assert res.exit_code != 0 and "rlobs explain --list" in res.output
