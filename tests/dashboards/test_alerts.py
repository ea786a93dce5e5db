"""Alert rules: promtool-valid, unit-tested ("not yet" and "firing with runbook_url" for each), linked."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from rlobs.catalogue import all_exposed_names
from rlobs.dashboards import alerts as a
from rlobs.dashboards import selectors as s

from .conftest import DASHBOARDS, RUNBOOKS, need

# Failures the issue names; each must have at least one alert (ids are ours, kebab-case).
REQUIRED = {"staleness-over-bound", "weight-sync-boundary-failed", "weight-sync-fingerprint-mismatch",
            "weight-sync-slow", "grad-norm-nonfinite", "grad-norm-spike", "advantage-denominator-collapse",
            "grader-timeouts", "grader-hung", "trainer-starved", "parity-drift", "telemetry-drops", "heartbeat-lost"}


def test_required_alerts_exist_with_severity_and_annotations():
    assert REQUIRED <= set(a.ALERT_IDS)
    doc = yaml.safe_load((DASHBOARDS / "alerts.yaml").read_text())
    assert doc == a.rules_document()  # the YAML writer round-trips through a real YAML parser
    rules = doc["groups"][0]["rules"]
    assert len(rules) == len(a.RULES)
    for r in rules:
        assert r["labels"]["severity"] in ("critical", "warning", "info")
        assert set(r["annotations"]) == {"summary", "description", "runbook_url"}
        assert all(r["annotations"].values())


def test_runbook_urls_follow_one_pattern_and_every_alert_has_its_runbook():
    for r in a.RULES:
        assert r.runbook_url == f"{a.RUNBOOK_BASE_URL}{r.id}.md"
        page = RUNBOOKS / f"{r.id}.md"
        assert page.is_file(), f"alert {r.name} has no runbook {page}"


def test_a_teams_runbook_base_url_goes_into_every_rule_and_its_promtool_tests(tmp_path):
    """`rlobs dashboards build --runbook-base-url` points every runbook_url at the team's own pages;
    the generated promtool tests expect the same links and pass."""
    from typer.testing import CliRunner

    from rlobs.cli import app

    base = "https://wiki.example.internal/ml/rlobs-runbooks"  # no trailing slash: the pattern adds it
    res = CliRunner().invoke(app, ["dashboards", "build", "--out", str(tmp_path), "--runbook-base-url", base])
    assert res.exit_code == 0, res.output
    rules = yaml.safe_load((tmp_path / "alerts.yaml").read_text())["groups"][0]["rules"]
    assert {r["annotations"]["runbook_url"] for r in rules} == {f"{base}/{r.id}.md" for r in a.RULES}
    assert (DASHBOARDS / "alerts.yaml").read_text() != (tmp_path / "alerts.yaml").read_text()
    out = subprocess.run([need("promtool"), "test", "rules", "alerts_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_alert_queries_name_only_catalogue_metrics():
    for r in a.RULES:
        names = s.metric_names(r.expr)
        assert names and names <= all_exposed_names() | {"up"}, (r.id, names)  # up: Prometheus' own, per target
        # series the description's {{ with query ... }} blocks read count too (no-progress names the quietest process)
        for query in re.findall(r'with query \(printf "(.*?)" \$', r.description):
            names |= s.metric_names(query)
        case_metrics = {name for name, _labels, _values in r.case.series}
        assert case_metrics <= names, f"{r.id}: promtool case feeds {case_metrics - names}, not in the expression"


def test_promtool_check_rules():
    out = subprocess.run([need("promtool"), "check", "rules", str(DASHBOARDS / "alerts.yaml")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(a.RULES)} rules found" in out.stdout


def test_promtool_unit_tests_not_yet_and_firing_for_every_alert():
    doc = yaml.safe_load((DASHBOARDS / "alerts_test.yaml").read_text())
    tested = {}
    for t in doc["tests"]:
        (early, late, *after) = t["alert_rule_test"]
        assert early["alertname"] == late["alertname"]
        assert early["exp_alerts"] == [] and len(late["exp_alerts"]) == 1
        rule = next(r for r in a.RULES if r.name == early["alertname"])
        if "up" in s.metric_names(rule.expr) and rule.id != "process-down":  # gated on the process running
            (gone,) = after  # one minute after the firing time the process's target has gone (a clean end)
            assert gone["exp_alerts"] == [] and gone["alertname"] == rule.name
        else:
            assert not after
        annotations = late["exp_alerts"][0]["exp_annotations"]
        assert annotations["runbook_url"].endswith(".md") and "{{" not in annotations["description"]
        tested[early["alertname"]] = (early["eval_time"], late["eval_time"])
    assert set(tested) == {r.name for r in a.RULES}
    out = subprocess.run([need("promtool"), "test", "rules", "alerts_test.yaml"], cwd=DASHBOARDS,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_every_rate_or_silence_based_alert_is_gated_on_its_process_running():
    """A finished run pages nobody: alerts over a window (rates, increases, max/avg_over_time) keep seeing
    the run's last minutes after it ended, so each is cut by ``up == 1`` of its component."""
    for r in a.RULES:
        windowed = bool(re.search(r"\[[0-9]+[smh]\]", r.expr)) or "time()" in r.expr
        if windowed and r.id != "process-down":
            assert "== 1)" in r.expr and " and on (" in r.expr, r.id


def test_promtool_unit_tests_catch_a_broken_rule(tmp_path):
    """The promtool cases are not vacuous: weaken one threshold and its case fails."""
    rules = a.rules_yaml().replace("(rlobs_staleness_max_versions) > 4", "(rlobs_staleness_max_versions) > 40")
    assert rules != a.rules_yaml()
    (tmp_path / "alerts.yaml").write_text(rules)
    (tmp_path / "alerts_test.yaml").write_text(a.promtool_tests_yaml())
    out = subprocess.run([need("promtool"), "test", "rules", "alerts_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "RlobsStalenessOverBound" in out.stdout + out.stderr


def test_alert_names_and_ids():
    assert a.rule("grad-norm-nonfinite").name == "RlobsGradNormNonfinite"
    assert len({r.name for r in a.RULES}) == len(a.RULES)
    import pytest

    with pytest.raises(ValueError, match="valid"):
        a.rule("nope")


def test_zero_std_alert_is_quiet_on_a_solved_task_and_fires_on_a_grader_constant_at_one(tmp_path):
    """`make main MODEL=smollm2` solves its task by step 5: every group all correct, the reward 1.0, held-out success
    0.99. That is not a page. A grader that turned constant at 1 gives the same zero-std share and training reward
    but leaves held-out success where it was (0.63), and a run that evaluates no held-out success cannot tell the
    two apart: both page; so do held-out success 0.12 under the reward, a dip in the last 10 minutes, and a reward
    outside [0, 1]. A real promtool evaluates the committed rule at 25 minutes."""
    labels = {**a.CASE_LABELS}

    def sel(name: str, **extra: str) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in {**labels, **extra}.items()) + "}"

    def case(name: str, heldout: str | None, fires: bool, reward: str = "0.8x5 1x24") -> dict:
        series = [{"series": sel("rlobs_advantage_zero_std_groups_ratio"), "values": "0.1x5 1x24"},
                  {"series": sel("rlobs_reward_mean"), "values": reward},
                  {"series": sel("up"), "values": "1x30"}]
        if heldout is not None:  # the orchestrator's evaluation, another component of the same run
            series.append({"series": sel("rlobs_heldout_success", component="orchestrator"), "values": heldout})
        r = a.rule("advantage-zero-std-groups")
        alert = {**r.labels, "run": "r1", "component": "trainer"}
        got = [{"exp_labels": alert, "exp_annotations": {k: a._render(v, alert, "100%")
                                                         for k, v in r.annotations().items()}}] if fires else []
        return {"name": name, "interval": "1m", "input_series": series,
                "alert_rule_test": [{"eval_time": "25m", "alertname": r.name, "exp_alerts": got}]}

    doc = {"rule_files": [str(DASHBOARDS / "alerts.yaml")], "evaluation_interval": "1m", "tests": [
        case("solved: held-out success matches the reward", "0.62x5 0.99x24", fires=False),
        case("a grader constant at 1: held-out success stays", "0.62x5 0.63x24", fires=True),
        case("held-out success 0.88, 0.12 under the reward", "0.62x5 0.88x24", fires=True),
        case("no held-out success evaluated", None, fires=True),
        case("held-out success dipped to 0.7 in the last 10 minutes", "0.62x5 0.99x12 0.7x4 0.99x8", fires=True),
        case("a reward not bounded in [0, 1]", "0.62x5 0.99x24", fires=True, reward="0.8x5 1x12 3 1x11")]}
    (tmp_path / "solved_test.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([need("promtool"), "test", "rules", "solved_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_oversized_updates_alert_is_quiet_on_a_solved_task_whose_steps_have_no_gradient(tmp_path):
    """The real `make main MODEL=smollm2` run of bench/solved_task.py's tune split (tests/early_warning/data): it
    solves its task by step 5, every group all correct from then on (grad norm 0). Its updates of steps 1-4 were
    over the bar, its entropy fell and held-out success climbed 0.59 -> 0.98: the guarded leg's pattern at step 5,
    the one step the doctor warned at before it judged only steps with a gradient. Replayed at a step every 2
    minutes (scraped every 30 s), a real promtool evaluates the committed rule every 30 s: quiet throughout. The
    same series with a gradient at every step fires at 11 minutes (step 5): the gate is what keeps it quiet."""
    import json

    steps = json.loads((Path(__file__).resolve().parents[1] / "early_warning" / "data" / "smollm2_solved.json")
                       .read_text())["runs"]["smollm2-main-s0"]["steps"]
    per = 4  # scrapes per step
    labels = {**a.CASE_LABELS}

    def sel(name: str, **extra: str) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in {**labels, **extra}.items()) + "}"

    def vals(xs: list[float]) -> str:
        return " ".join(" ".join([f"{x:.9g}"] * per) for x in xs)

    held, last = [], None
    for r in steps:  # the driver's gauge holds its last evaluation
        last = r.get("heldout", last)
        held.append(last)
    r = a.rule("precursor-oversized-updates")
    alert = {**r.labels, "run": "r1", "component": "trainer"}
    notes = {k: a._render(v, alert, "19.48m") for k, v in r.annotations().items()}  # the 20th percentile of steps 1-5

    def case(name: str, grad: list[float], firing_at: set[int]) -> dict:
        series = [{"series": sel("rlobs_policy_update_kl"), "values": vals([x["policy_kl"] for x in steps])},
                  {"series": sel("rlobs_policy_entropy"), "values": vals([x["entropy"] for x in steps])},
                  {"series": sel("rlobs_reward_mean"), "values": vals([x["reward"] for x in steps])},
                  {"series": sel("rlobs_grad_norm"), "values": vals(grad)},
                  {"series": sel("rlobs_train_steps_total"), "values": vals([x["step"] + 1 for x in steps])},
                  {"series": sel("rlobs_heldout_success", component="orchestrator"), "values": vals(held)},
                  {"series": sel("up"), "values": vals([1] * len(steps))}]
        tests = [{"eval_time": f"{t}s", "alertname": r.name,
                  "exp_alerts": [{"exp_labels": alert, "exp_annotations": notes}] if t in firing_at else []}
                 for t in range(60, 30 * per * len(steps), 30)]
        return {"name": name, "interval": "30s", "input_series": series, "alert_rule_test": tests}

    assert [x["grad_norm"] for x in steps][5:7] == [0.0, 0.0]
    doc = {"rule_files": [str(DASHBOARDS / "alerts.yaml")], "evaluation_interval": "30s", "tests": [
        case("solved as recorded: step 5 had no gradient", [x["grad_norm"] for x in steps], set()),
        case("the same with a gradient at every step", [x["grad_norm"] or 1.0 for x in steps], {660, 690})]}
    (tmp_path / "solved_oversized_test.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([need("promtool"), "test", "rules", "solved_oversized_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr
