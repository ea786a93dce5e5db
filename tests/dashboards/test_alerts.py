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


def _build(out: Path, *args: str) -> None:
    from typer.testing import CliRunner

    from rlobs.cli import app

    res = CliRunner().invoke(app, ["dashboards", "build", "--out", str(out), *args])
    assert res.exit_code == 0, res.output


def _promtool_precursors(built: Path, rules_from: Path, work: Path,
                         only: str | None = None) -> subprocess.CompletedProcess:
    """promtool on the precursor alerts alone (the whole file takes ~20 s at a scaled evaluation interval): the
    precursor rules of ``rules_from``'s alerts.yaml against the precursor cases of ``built``'s alerts_test.yaml
    (``only``: that one alert's rule and case)."""
    names = {r.name for r in a.precursor_rules()}
    assert only is None or only in names, only
    rules = yaml.safe_load((rules_from / "alerts.yaml").read_text())
    rules["groups"][0]["rules"] = [r for r in rules["groups"][0]["rules"] if r["alert"] in names]
    tests = yaml.safe_load((built / "alerts_test.yaml").read_text())
    tests["tests"] = [t for t in tests["tests"] if t["alert_rule_test"][0]["alertname"] in names]
    assert len(rules["groups"][0]["rules"]) == len(tests["tests"]) == 8
    if only:
        rules["groups"][0]["rules"] = [r for r in rules["groups"][0]["rules"] if r["alert"] == only]
        tests["tests"] = [t for t in tests["tests"] if t["alert_rule_test"][0]["alertname"] == only]
    work.mkdir(exist_ok=True)
    (work / "alerts.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    (work / "alerts_test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    return subprocess.run([need("promtool"), "test", "rules", "alerts_test.yaml"], cwd=work, capture_output=True,
                          text=True, timeout=120)


def test_precursor_alerts_built_for_a_slower_step_hold_the_same_steps(tmp_path):
    """`rlobs dashboards build --step-seconds 300`: every precursor window and `for` is scaled 2.5x (the last 10 min
    -> 25 min: 5 steps of 5 minutes), the other alerts are the committed ones, and the generated promtool tests (each
    precursor case 2.5x slower, as a run at 5 minutes a step) pass. The committed rules fail those slower cases: the
    oversized-updates alert, for one, needs 4 changes of its gauge in its last 10 minutes, 2 steps at that pace."""
    _build(tmp_path / "built", "--step-seconds", "300")
    committed = {r["alert"]: r for r in yaml.safe_load((DASHBOARDS / "alerts.yaml").read_text())["groups"][0]["rules"]}
    built = {r["alert"]: r for r in
             yaml.safe_load((tmp_path / "built" / "alerts.yaml").read_text())["groups"][0]["rules"]}
    assert built.keys() == committed.keys()
    precursors = {r.name for r in a.precursor_rules()}
    assert len(precursors) == 8
    for name, r in built.items():
        if name not in precursors:
            assert r == committed[name], name
            continue
        want = {"1m": "150s", "10m": "25m"}[committed[name]["for"]]
        assert r["for"] == want, name
        assert "[25m]" in r["expr"] and "[10m]" not in r["expr"] and "[1h]" not in r["expr"], name
        if re.search(r"offset (?!6h)", committed[name]["expr"]):  # (6h: the fresh-data gate's pause mean, not scaled)
            assert "[150m] offset 25m" in r["expr"], name
    out = _promtool_precursors(tmp_path / "built", tmp_path / "built", tmp_path / "scaled")
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr
    # the same slower case, the committed rule (that alert's alone: the whole set takes ~35 s more)
    out = _promtool_precursors(tmp_path / "built", DASHBOARDS, tmp_path / "committed",
                               only="RlobsPrecursorOversizedUpdates")
    assert out.returncode != 0 and "RlobsPrecursorOversizedUpdates" in out.stdout + out.stderr, out.stdout


def test_precursor_alerts_built_for_a_faster_step_pass_their_own_promtool_cases(tmp_path):
    _build(tmp_path / "built", "--step-seconds", "30")  # 10 min -> 150 s (5 steps of 30 s), 1 h -> 15m, 1m -> 15 s
    rules = {r["alert"]: r for r in
             yaml.safe_load((tmp_path / "built" / "alerts.yaml").read_text())["groups"][0]["rules"]}
    assert rules["RlobsPrecursorGradNormDrift"]["for"] == "15s"
    assert "[150s]" in rules["RlobsPrecursorGradNormDrift"]["expr"]
    out = _promtool_precursors(tmp_path / "built", tmp_path / "built", tmp_path / "scaled")
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_a_step_time_out_of_range_is_refused_and_an_odd_one_rounded(tmp_path):
    from typer.testing import CliRunner

    from rlobs import exitcodes
    from rlobs.cli import app

    res = CliRunner().invoke(app, ["dashboards", "build", "--out", str(tmp_path), "--step-seconds", "0"])
    assert res.exit_code == exitcodes.USAGE and "--step-seconds" in res.output
    assert not (tmp_path / "alerts.yaml").exists()
    # an odd step time is built for the nearest whole even seconds (every scaled window and case minute whole)
    res = CliRunner().invoke(app, ["dashboards", "build", "--out", str(tmp_path), "--step-seconds", "301"])
    assert res.exit_code == 0 and "built for 300 s a step" in res.output
    assert "optimiser steps of 300 s" in (tmp_path / "alerts.yaml").read_text()


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
    rules = a.rules_yaml().replace("(rlobs_staleness_max_versions)) > 4", "(rlobs_staleness_max_versions)) > 40")
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


def _oversized_series(steps: list[dict], over: dict[str, list[float]] | None = None, per: int = 4) -> list[dict]:
    """A real run's per-step signals as the oversized-updates alert reads them, at a step every 2 minutes scraped
    ``per`` times each (run r1; ``over``: per-step overrides of a signal). With them the exporter's baselines, as
    the Prometheus sink serves them (tested in tests/rlobs/test_prometheus_sink.py): the median reward of the first
    REWARD_BASELINE_STEPS steps from the step that completes them (the entropy's likewise), the first held-out reading
    from its step, and from the second evaluation on the best of the evaluations after the first and the mean of the
    last HELDOUT_RECENT of them; absent before ("_")."""
    import statistics

    from rlobs.catalogue import HELDOUT_RECENT, REWARD_BASELINE_STEPS

    over = over or {}

    def sel(name: str, **extra: str) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in {**a.CASE_LABELS, **extra}.items()) + "}"

    def vals(xs: list[float | None]) -> str:
        return " ".join(" ".join(["_" if x is None else f"{x:.9g}"] * per) for x in xs)

    held, best, recent, last, evals = [], [], [], None, []
    for r in steps:  # the driver's gauges hold their last evaluation
        if r.get("heldout") is not None:
            evals.append(r["heldout"])
        last = r.get("heldout", last)
        held.append(last)
        after = evals[1:]
        best.append(max(after) if after else None)
        recent.append(statistics.mean(after[-HELDOUT_RECENT:]) if after else None)
    col = {k: over.get(k) or [x[k] for x in steps] for k in ("policy_kl", "entropy", "reward", "grad_norm")}
    n = REWARD_BASELINE_STEPS
    base = statistics.median(col["reward"][:n])
    ent_base = statistics.median(col["entropy"][:n])
    first_held = next(h for h in held if h is not None)
    series = [{"series": sel("rlobs_policy_update_kl"), "values": vals(col["policy_kl"])},
              {"series": sel("rlobs_policy_entropy"), "values": vals(col["entropy"])},
              {"series": sel("rlobs_reward_mean"), "values": vals(col["reward"])},
              {"series": sel("rlobs_reward_baseline"), "values": vals([None] * (n - 1) + [base] * (len(steps) - n + 1))},
              {"series": sel("rlobs_grad_norm"), "values": vals(col["grad_norm"])},
              {"series": sel("rlobs_train_steps_total"), "values": vals([x["step"] + 1 for x in steps])},
              {"series": sel("rlobs_heldout_success", component="orchestrator"), "values": vals(held)},
              {"series": sel("rlobs_heldout_success_baseline", component="orchestrator"),
               "values": vals([None if h is None else first_held for h in held])},
              {"series": sel("rlobs_heldout_success_best", component="orchestrator"), "values": vals(best)},
              {"series": sel("rlobs_heldout_success_recent", component="orchestrator"), "values": vals(recent)},
              {"series": sel("rlobs_policy_entropy_baseline"),
               "values": vals([None] * (n - 1) + [ent_base] * (len(steps) - n + 1))},
              {"series": sel("rlobs_train_step_last_timestamp_seconds"), "values": _stamps(len(steps), per)},
              {"series": sel("up"), "values": vals([1] * len(steps))}]
    if "zero_std" in steps[0]:
        series.append({"series": sel("rlobs_advantage_zero_std_groups_ratio"),
                       "values": vals(over.get("zero_std") or [x["zero_std"] for x in steps])})
    return series


def _oversized_replay(tmp_path: Path, steps: list[dict], value: str, cases: list[tuple[str, dict, set[int]]]) -> None:
    """A real run's per-step signals replayed at a step every 2 minutes (scraped every 30 s) into a real promtool that
    evaluates the committed RlobsPrecursorOversizedUpdates every 30 s. ``cases``: (name, per-step overrides of a
    signal, the evaluation seconds it must fire at: quiet at every other); ``value``: the alert's rendered value."""
    per = 4  # scrapes per step
    r = a.rule("precursor-oversized-updates")
    alert = {**r.labels, "run": "r1", "component": "trainer"}
    notes = {k: a._render(v, alert, value) for k, v in r.annotations().items()}

    def case(name: str, over: dict[str, list[float]], firing_at: set[int]) -> dict:
        tests = [{"eval_time": f"{t}s", "alertname": r.name,
                  "exp_alerts": [{"exp_labels": alert, "exp_annotations": notes}] if t in firing_at else []}
                 for t in range(60, 30 * per * len(steps), 30)]
        return {"name": name, "interval": "30s", "input_series": _oversized_series(steps, over, per),
                "alert_rule_test": tests}

    doc = {"rule_files": [str(DASHBOARDS / "alerts.yaml")], "evaluation_interval": "30s",
           "tests": [case(*c) for c in cases]}
    (tmp_path / "oversized_replay_test.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([need("promtool"), "test", "rules", "oversized_replay_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def _stamps(steps: int, per: int = 4, step_s: int = 120) -> str:
    """promtool values of the trainer's last-step timestamp for ``steps`` steps replayed one every ``step_s`` seconds
    and scraped ``per`` times each: the precursor alerts hold only while their run steps (``alerts.fresh_data``)."""
    return " ".join(" ".join([str(i * step_s)] * per) for i in range(steps))


def _real_run(file: str, name: str) -> list[dict]:
    import json

    path = Path(__file__).resolve().parents[1] / "early_warning" / "data" / file
    return json.loads(path.read_text())["runs"][name]["steps"]


def test_oversized_updates_alert_is_quiet_on_a_solved_task_whose_steps_have_no_gradient(tmp_path):
    """The real `make main MODEL=smollm2` run of bench/solved_task.py's tune split (tests/early_warning/data): it
    solves its task by step 5, every group all correct from then on (grad norm 0). Its updates of steps 1-4 were
    over the bar, its entropy fell and held-out success climbed 0.59 -> 0.98: the guarded leg's pattern at step 5,
    the one step the doctor warned at before it judged only steps with a gradient. Replayed, quiet throughout. The
    same series with a gradient at every step (each moving the policy 0.019 nats per token, as steps 1-4 did) and no
    zero-std groups fires from 12 minutes (step 5 and the alert's `for`) to step 9: the gates are what keep it quiet.
    (Until the fifty-seventh early-warning run the gradient alone fired it, at 11 minutes: the entropy was read
    against the hour before's highest reading; against the median of its first 5 steps, as the doctor reads it, the
    pattern holds from step 5, and step 5's update of 3e-5 nats ended it before the `for`.)"""
    steps = _real_run("smollm2_solved.json", "smollm2-main-s0")
    assert [x["grad_norm"] for x in steps][5:7] == [0.0, 0.0]
    grad = [x["grad_norm"] or 1.0 for x in steps]
    moved = [x["policy_kl"] if x["grad_norm"] else 0.0194765 for x in steps]  # steps 1-5's 20th percentile
    _oversized_replay(tmp_path, steps, "19.48m", [
        ("solved as recorded: step 5 had no gradient", {}, set()),
        ("a gradient at every step: most groups all correct at a high reward (solved)",
         {"grad_norm": grad, "policy_kl": moved}, set()),
        ("a gradient at every step, no group solved",
         {"grad_norm": grad, "policy_kl": moved, "zero_std": [0.0] * len(steps)}, set(range(720, 1200, 30)))])


def test_oversized_updates_alert_is_quiet_on_a_solved_policys_update_burst(tmp_path):
    """healthy-t07-s214 (thirty-ninth run, real): a solved T 0.7 policy (7 of 8 groups all correct at most steps)
    took a burst of large updates at steps 54-58, which the doctor warned on before its solved guard, falsely (the
    same seed held 0.87-0.91 held out to step 100). Replayed: quiet throughout. Here the guard is not what keeps it
    quiet (with half the groups zero-std it stays quiet too): the alert's early reward level is the hour before,
    where this run had already learned (the doctor's is the run's first steps)."""
    steps = _real_run("t07_solved.json", "healthy-t07-s214")
    _oversized_replay(tmp_path, steps, "0", [
        ("solved as recorded", {}, set()), ("half the groups zero-std", {"zero_std": [0.5] * len(steps)}, set())])


def test_reward_hacking_alert_asks_two_held_out_readings_on_real_runs(tmp_path):
    """Two real runs (tests/early_warning/data/reward_hacking_heldout.json), replayed at a step every 2 minutes
    (scraped every 30 s, held-out success every 5 steps) into a real promtool beside the same held-out leg on one
    reading (the rule until the forty-second early-warning run). healthy-g8x2-s211's reward climbs ahead of its next
    evaluation: one reading pages it at 67.5 minutes (step 33); the committed rule, which asks the condition one
    window before too, is quiet throughout. reward-hacking-s146, without its audit gauge (the held-out leg alone),
    still pages, at the step the doctor's held-out leg warns (30) plus the alert's `for`: quiet before it."""
    import json

    from rlobs.doctor.rules.precursors import _divergence
    from rlobs.failures import thresholds

    runs = json.loads((Path(__file__).resolve().parents[1] / "early_warning" / "data"
                       / "reward_hacking_heldout.json").read_text())["runs"]
    th = thresholds("precursor-reward-hacking")
    per = 4  # scrapes per step
    r = a.rule("precursor-reward-hacking")
    one = {"groups": [{"name": "one-reading", "rules": [
        {"alert": "OneReading", "for": r.for_,
         "expr": a.reward_hacking_heldout(a.PRECURSOR_WINDOWS["recent"], a.PRECURSOR_WINDOWS["history"], th,
                                          readings=1)}]}]}
    (tmp_path / "one_reading.yaml").write_text(yaml.safe_dump(one))
    alert = {**r.labels, "run": "r1", "component": "trainer"}
    notes = {k: a._render(v, alert, "552.5m") for k, v in r.annotations().items()}  # the reward's gain at step 30

    def sel(name: str, **extra: str) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in {**a.CASE_LABELS, **extra}.items()) + "}"

    def case(name: str, firing: dict[str, set[int]]) -> dict:
        steps = runs[name]["steps"]
        held, last = [], None
        for x in steps:  # the driver's gauge holds its last evaluation
            last = x.get("heldout", last)
            held.append(last)

        def vals(xs: list[float]) -> str:
            return " ".join(" ".join([f"{v:.9g}"] * per) for v in xs)

        series = [{"series": sel("rlobs_reward_mean"), "values": vals([x["reward"] for x in steps])},
                  {"series": sel("rlobs_heldout_success", component="orchestrator"), "values": vals(held)},
                  {"series": sel("rlobs_train_step_last_timestamp_seconds"), "values": _stamps(len(steps), per)},
                  {"series": sel("up"), "values": vals([1] * len(steps))}]
        times = range(60, 30 * per * len(steps), 30)
        tests = [{"eval_time": f"{t}s", "alertname": r.name,
                  "exp_alerts": [{"exp_labels": alert, "exp_annotations": notes}] if t in firing[r.name] else []}
                 for t in times if t <= max(firing[r.name], default=times[-1])]
        tests += [{"eval_time": f"{t}s", "alertname": "OneReading",
                   "exp_alerts": [{"exp_labels": {"alertname": "OneReading", "run": "r1", "component": "trainer"}}]}
                  for t in firing["OneReading"]]
        return {"name": name, "interval": "30s", "input_series": series, "alert_rule_test": tests}

    hacking = runs["reward-hacking-s146"]["steps"]
    warned = _divergence([(x["step"], x["reward"]) for x in hacking],
                         [(x["step"], x["heldout"]) for x in hacking if "heldout" in x], th)
    assert warned is not None and warned[0] == 30  # the doctor's held-out leg
    doc = {"rule_files": [str(DASHBOARDS / "alerts.yaml"), "one_reading.yaml"], "evaluation_interval": "30s",
           "tests": [case("healthy-g8x2-s211", {r.name: set(), "OneReading": {4050}}),
                     # pending at step 30's first scrape, firing a `for` (1 minute) later: 3660 s
                     case("reward-hacking-s146", {r.name: {3660}, "OneReading": set()})]}
    (tmp_path / "hacking_heldout_test.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([need("promtool"), "test", "rules", "hacking_heldout_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def _quiet_where_variant_pages(tmp_path: Path, case: str, r: a.AlertRule, variant: str, expr: str,
                               series: list[dict], times: range, firing: set[int]) -> None:
    """In a real promtool, on ``series``: the committed rule ``r`` fires at none of ``times`` (seconds), and
    ``variant``, the same rule with ``expr`` for its expression (a guard or gate taken out), fires exactly at
    ``firing`` (for run r1, the trainer)."""
    (tmp_path / "variant.yaml").write_text(yaml.safe_dump({"groups": [{"name": "variant", "rules": [
        {"alert": variant, "for": r.for_, "expr": expr}]}]}))
    paged = {"alertname": variant, "run": "r1", "component": "trainer"}
    tests = [{"eval_time": f"{t}s", "alertname": r.name, "exp_alerts": []} for t in times]
    tests += [{"eval_time": f"{t}s", "alertname": variant,
               "exp_alerts": [{"exp_labels": paged}] if t in firing else []} for t in times]
    doc = {"rule_files": [str(DASHBOARDS / "alerts.yaml"), "variant.yaml"], "evaluation_interval": "30s",
           "tests": [{"name": case, "interval": "30s", "input_series": series, "alert_rule_test": tests}]}
    (tmp_path / "variant_test.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([need("promtool"), "test", "rules", "variant_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_entropy_decline_alert_is_quiet_on_a_real_solved_run(tmp_path):
    """A real healthy run converging on a solved task (tests/early_warning/data/entropy_solved.json:
    healthy-dp2-completion-s228, training reward 0.8-0.98 over its last steps, entropy 0.06-0.26), replayed at a step
    every 2 minutes (scraped every 30 s) into a real promtool. The rule without its solved guard (the same expression,
    the reward bar out of reach) pages it at steps 57-58, as the live replay of the forty-second early-warning run
    did (pending at step 56); the committed rule, silent while the recent reward is at solved_reward or more, is quiet throughout."""
    import json

    from rlobs.failures import thresholds

    steps = json.loads((Path(__file__).resolve().parents[1] / "early_warning" / "data"
                        / "entropy_solved.json").read_text())["steps"]
    per = 4  # scrapes per step
    r = a.rule("precursor-entropy-decline")
    bar = f"< {thresholds('precursor-entropy-decline')['solved_reward']:g})"
    assert r.expr.count(bar) == 1

    def sel(name: str) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in a.CASE_LABELS.items()) + "}"

    def vals(xs: list[float]) -> str:
        return " ".join(" ".join([f"{v:.9g}"] * per) for v in xs)

    series = [{"series": sel("rlobs_reward_mean"), "values": vals([x["reward"] for x in steps])},
              {"series": sel("rlobs_policy_entropy"), "values": vals([x["entropy"] for x in steps])},
              {"series": sel("rlobs_train_steps_total"), "values": vals([i + 1 for i in range(len(steps))])},
              {"series": sel("rlobs_train_step_last_timestamp_seconds"), "values": _stamps(len(steps), per)},
              {"series": sel("up"), "values": vals([1] * len(steps))}]
    firing = set(range(6840, 7020, 30))  # steps 57-58 (a step is 120 s): pending a `for` (1 min) before
    _quiet_where_variant_pages(tmp_path, "healthy-dp2-completion-s228", r, "Unguarded", r.expr.replace(bar, "< 2)"),
                               series, range(60, 30 * per * len(steps), 30), firing)


def test_precursor_alerts_hold_only_while_the_run_steps(tmp_path):
    """A real healthy run (tests/early_warning/data/held_after_last_step.json: healthy-kl-s11) replayed at a step
    every 2 minutes (scraped every 30 s) into a real promtool, then its trainer lingers for 40 minutes with its
    exporter up and its last readings held (a final evaluation, a checkpoint upload, a hang). The reward-hacking rule
    without the fresh-data gate (the same expression, ``alerts.fresh_data`` taken out) pages it 23-30 minutes after its
    last step, as the live replay of the forty-fifth early-warning run did (pending 10.8 replay seconds after it); the
    committed rule, which holds only while the run has stepped within its recent window, is quiet throughout."""
    import json

    steps = json.loads((Path(__file__).resolve().parents[1] / "early_warning" / "data"
                        / "held_after_last_step.json").read_text())["steps"]
    per, hold = 4, 80  # scrapes per step; scrapes after the last step (40 minutes)
    r = a.rule("precursor-reward-hacking")
    gate = f" and on (run) {a.fresh_data(a.PRECURSOR_WINDOWS['recent'])}"
    assert r.expr.count(gate) == 1

    def sel(name: str, **extra: str) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in {**a.CASE_LABELS, **extra}.items()) + "}"

    def vals(xs: list[float]) -> str:  # each step's reading for its scrapes, the last one held after it
        return " ".join(" ".join([f"{v:.9g}"] * per) for v in xs) + f" {xs[-1]:.9g}x{hold - 1}"

    held, last = [], None
    for x in steps:  # the driver's gauge holds its last evaluation
        last = x.get("heldout", last)
        held.append(last)
    series = [{"series": sel("rlobs_reward_mean"), "values": vals([x["reward"] for x in steps])},
              {"series": sel("rlobs_grader_audit_gap"), "values": vals([x["audit_gap"] for x in steps])},
              {"series": sel("rlobs_heldout_success", component="orchestrator"), "values": vals(held)},
              {"series": sel("rlobs_train_step_last_timestamp_seconds"),
               "values": vals([120 * x["step"] for x in steps])},
              {"series": sel("up"), "values": vals([1] * len(steps))}]
    last_step = 120 * steps[-1]["step"]
    firing = set(range(8460, 8880, 30))  # 23-30 minutes after the last step (7080 s)
    assert min(firing) > last_step + 600  # over one recent window (10 minutes) after the last step
    _quiet_where_variant_pages(tmp_path, "healthy-kl-s11, held after its last step", r, "Stale",
                               r.expr.replace(gate, ""), series, range(60, 30 * (per * len(steps) + hold), 30), firing)


def test_precursor_alerts_hold_through_a_declared_pause(tmp_path):
    """The fresh-data gate stays open while the run is in a pause it declared: the reward-hacking case's series, the
    trainer stepping each minute to minute 82 and then evaluating held-out success from minute 82 on (declared as
    trainer_ref declares it). 13 minutes after the last step, over the 10-minute recent window, the committed alert
    still fires (the pause allowance: at least the no-progress floor); the same run with the evaluation undeclared
    does not (held readings). The forty-seventh early-warning run's gate, without the allowance, shut inside a declared
    evaluation of 7.1 mean steps."""
    r = a.rule("precursor-reward-hacking")
    alert = {**r.labels, "run": "r1", "component": "trainer"}
    notes = {k: a._render(v, alert, "500m") for k, v in r.annotations().items()}

    def sel(name: str, **extra: str) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in {**a.CASE_LABELS, **extra}.items()) + "}"

    def case(declared: bool) -> dict:
        series = _trainer_with_pauses(100, list(range(83)), [(82, None)], declared=declared)
        series += [{"series": sel("rlobs_reward_mean"), "values": "0.2x70 0.7x30"},
                   {"series": sel("rlobs_heldout_success", component="driver"), "values": "0.3x100"}]
        got = [{"exp_labels": alert, "exp_annotations": notes}] if declared else []
        return {"name": f"evaluation from minute 82, {'declared' if declared else 'undeclared'}", "interval": "1m",
                "input_series": series,
                "alert_rule_test": [{"eval_time": "88m", "alertname": r.name,
                                     "exp_alerts": [{"exp_labels": alert, "exp_annotations": notes}]},
                                    {"eval_time": "95m", "alertname": r.name, "exp_alerts": got}]}

    doc = {"rule_files": [str(DASHBOARDS / "alerts.yaml")], "evaluation_interval": "1m",
           "tests": [case(True), case(False)]}
    (tmp_path / "pause_test.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([need("promtool"), "test", "rules", "pause_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def _trainer_with_pauses(minutes: int, steps: list[int], pauses: list[tuple[int, int | None]],
                         declared: bool = True, step_s: int = 60) -> list[dict[str, str]]:
    """promtool input series, one sample a minute for ``minutes`` minutes: the trainer steps at each minute of ``steps``
    (``step_s`` of optimiser time each), and its driver evaluates held-out success over each ``(start, end)`` minute span of
    ``pauses`` (``end`` None: it never ends), declared as trainer_ref's ``telemetry.pause("eval")`` declares it: a
    heartbeat of phase ``eval`` on entry, a phase event ``evaluation`` on exit. ``declared=False``: the same run, its
    pauses undeclared (the rule before pauses counted)."""
    def sel(name: str, **extra: str) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in {**a.CASE_LABELS, **extra}.items()) + "}"

    def values(f) -> str:
        return " ".join("_" if (v := f(m)) is None else f"{v:g}" for m in range(minutes + 1))

    def done(m: int) -> list[int]:
        return [s for s in steps if s <= m]

    def ended(m: int) -> list[tuple[int, int]]:
        return [(b, e) for b, e in pauses if e is not None and e <= m]

    def started(m: int) -> list[int]:
        return [b for b, _ in pauses if b <= m]

    out = [{"series": sel("rlobs_train_steps_total"), "values": values(lambda m: len(done(m)))},
           {"series": sel("rlobs_trainer_step_seconds_total"), "values": values(lambda m: step_s * len(done(m)))},
           {"series": sel("rlobs_trainer_data_wait_seconds_total"), "values": values(lambda m: 0)},
           {"series": sel("rlobs_train_step_last_timestamp_seconds"),
            "values": values(lambda m: 60 * max(done(m)) if done(m) else None)},
           {"series": sel("up"), "values": f"1x{minutes}"},
           {"series": sel("up", component="driver"), "values": f"1x{minutes}"}]
    if declared:
        driver = {"component": "driver"}
        out += [{"series": sel("rlobs_heartbeat_timestamp_seconds", phase="eval", **driver),
                 "values": values(lambda m: 60 * max(started(m)) if started(m) else None)},
                {"series": sel("rlobs_phase_end_timestamp_seconds", phase="evaluation", **driver),
                 "values": values(lambda m: 60 * max(e for _, e in ended(m)) if ended(m) else None)},
                {"series": sel("rlobs_phase_seconds_total", phase="evaluation", **driver),
                 "values": values(lambda m: sum(60 * (e - b) for b, e in ended(m)) if ended(m) else None)},
                {"series": sel("rlobs_phases_total", phase="evaluation", **driver),
                 "values": values(lambda m: len(ended(m)) if ended(m) else None)}]
    else:  # the driver still beats, in another phase
        out.append({"series": sel("rlobs_heartbeat_timestamp_seconds", phase="sync", component="driver"),
                    "values": values(lambda m: 60 * m)})
    return out


def test_no_progress_allows_a_declared_pause_and_still_pages_a_hung_one(tmp_path):
    """The thirtieth early-warning run: healthy runs waited through held-out evaluations 5.6-11.6x as long as the
    no-progress yardstick (5 step intervals), so at a scale where the 60 s floor does not bind the page came while
    the run was healthy. A pause the trainer declares (``telemetry.pause``: heartbeat ``eval``, phase event
    ``evaluation``) adds 5x that pause's mean length (at least 600 s, a run's first pause) to the allowance, and its
    end counts as progress. promtool on the committed rule, a trainer stepping every minute (allowance 5 min):
    a 12-minute evaluation after a 2-minute one at minute 0 pages nobody (the same run undeclared pages at 16m); a
    hung evaluation pages once 5 + 10 minutes have passed since the last step; a trainer that hangs right after an
    evaluation pages 5 minutes after its end; with three 4-minute evaluations behind it the allowance is 5 + 20
    minutes, so a 22-minute evaluation does not page and a hung one pages at 26m."""
    r = a.rule("no-progress")
    every = list(range(1, 11))

    def case(name: str, steps: list[int], pauses: list[tuple[int, int | None]], checks: dict[int, str | None],
             minutes: int = 40, declared: bool = True) -> dict:
        alert = {**r.labels, "run": "r1", "component": "trainer"}

        def exp(value: str | None) -> list[dict]:
            return [] if value is None else [{"exp_labels": alert, "exp_annotations": {
                k: a._render(v, alert, value, "driver") for k, v in r.annotations().items()}}]

        return {"name": name, "interval": "1m", "input_series": _trainer_with_pauses(minutes, steps, pauses, declared),
                "alert_rule_test": [{"eval_time": f"{m}m", "alertname": r.name, "exp_alerts": exp(v)}
                                    for m, v in checks.items()]}

    resumed = every + list(range(23, 41))
    doc = {"rule_files": [str(DASHBOARDS / "alerts.yaml")], "evaluation_interval": "1m", "tests": [
        case("a 12-minute evaluation, declared: no page", resumed, [(0, 2), (10, 22)],
             {16: None, 21: None, 22: None, 24: None, 30: None}),
        case("the same evaluation, undeclared: paged while the run is healthy", resumed, [(0, 2), (10, 22)],
             {15: None, 16: "6m 0s", 22: "12m 0s", 24: None}, declared=False),
        case("a hung evaluation: paged 5 + 10 minutes after the last step", every, [(0, 2), (10, None)],
             {16: None, 25: None, 26: "16m 0s", 35: "25m 0s"}),
        case("a hang right after an evaluation: paged 5 minutes after its end", every, [(0, 2), (10, 22)],
             {22: None, 27: None, 28: "18m 0s"}),
        case("three 4-minute evaluations behind it: a 22-minute one does not page", list(range(13, 21)) +
             list(range(43, 50)), [(0, 4), (4, 8), (8, 12), (20, 42)], {26: None, 40: None, 44: None}, minutes=50),
        case("three 4-minute evaluations behind it: a hung one pages at 5 + 20 minutes", list(range(13, 21)),
             [(0, 4), (4, 8), (8, 12), (20, None)], {44: None, 46: "26m 0s"}, minutes=50)]}
    (tmp_path / "pause_test.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([need("promtool"), "test", "rules", "pause_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def _beats(minutes: int, at: list[int], component: str, phase: str, up: bool = True) -> list[dict[str, str]]:
    """A process's heartbeat gauge (a beat at each minute of ``at``) and (``up``) its ``up``, one sample a minute."""
    labels = {**a.CASE_LABELS, "component": component}
    sel = ",".join(f'{k}="{v}"' for k, v in labels.items())
    last = [max((b for b in at if b <= m), default=None) for m in range(minutes + 1)]
    return [{"series": f'rlobs_heartbeat_timestamp_seconds{{{sel},phase="{phase}"}}',
             "values": " ".join("_" if b is None else str(60 * b) for b in last)},
            {"series": f"up{{{sel}}}", "values": f"1x{minutes}"}][:2 if up else 1]


def test_doctor_behind_pages_a_doctor_that_never_judged_the_run(tmp_path):
    """A doctor that serves its endpoint but never finishes an evaluation (a first evaluation that hangs, a record it
    cannot read from the start) has no last-evaluation series: RlobsDoctorBehind counts from its start instead. A real
    promtool on the committed rule, scraped every minute, interval 10 s (floor 5 min): never judged pages at 7 minutes;
    judged every minute stays quiet; never judged while no process of the run but the doctor is up pages nobody."""
    r = a.rule("doctor-behind")
    doctor = {**a.CASE_LABELS, "component": "doctor"}

    def sel(name: str, **labels: str) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"

    def case(name: str, judged: str | None, trainer_up: str, fires: bool) -> dict:
        series = [{"series": sel("rlobs_doctor_started_timestamp_seconds", **doctor), "values": "0x20"},
                  {"series": sel("rlobs_doctor_interval_seconds", **doctor), "values": "10x20"},
                  {"series": sel("up", **doctor), "values": "1x20"},
                  {"series": sel("up", **a.CASE_LABELS), "values": trainer_up}]
        if judged is not None:
            series.append({"series": sel("rlobs_doctor_last_evaluation_timestamp_seconds", **doctor),
                           "values": judged})
        alert = {**r.labels, "run": doctor["run"], "component": "doctor"}
        got = [{"exp_labels": alert, "exp_annotations": {k: a._render(v, alert, "7m 0s")
                                                         for k, v in r.annotations().items()}}] if fires else []
        return {"name": name, "interval": "1m", "input_series": series,
                "alert_rule_test": [{"eval_time": "6m", "alertname": r.name, "exp_alerts": []},
                                    {"eval_time": "7m", "alertname": r.name, "exp_alerts": got}]}

    doc = {"rule_files": [str(DASHBOARDS / "alerts.yaml")], "evaluation_interval": "1m", "tests": [
        case("never judged, the run up", None, "1x20", fires=True),
        case("judged every minute", "0+60x20", "1x20", fires=False),
        case("never judged, the run's processes gone", None, "0x20", fires=False)]}
    (tmp_path / "behind_test.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([need("promtool"), "test", "rules", "behind_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_promql_precursors_defer_to_a_doctor_watching_the_run(tmp_path):
    """Each of the eight PromQL precursor alerts, on its own firing case (its committed promtool case), stays quiet
    while a doctor serves the run (rlobs_doctor_started_timestamp_seconds, component doctor: `rlobs observe` or
    `rlobs doctor --follow --metrics-port`), whose RlobsDoctorPrecursor pages instead; a doctor serving another run
    silences nothing, and one whose series went stale (the doctor stopped) hands the page back. A real promtool on
    the committed rules."""
    rules = a.precursor_rules()
    assert len(rules) == 8

    def case(r: a.AlertRule, doctor_run: str, doctor_values: str, fires: bool) -> dict:
        t = a._case_test(r)
        t["name"] = f"{r.name}, a doctor serving {doctor_run}: {doctor_values}"
        labels = {**a.CASE_LABELS, "component": "doctor", "run": doctor_run}
        t["input_series"].append({"series": "rlobs_doctor_started_timestamp_seconds{" + ",".join(
            f'{k}="{v}"' for k, v in labels.items()) + "}", "values": doctor_values})
        firing = next(c for c in t["alert_rule_test"] if c["exp_alerts"])
        t["alert_rule_test"] = [{**firing, "exp_alerts": firing["exp_alerts"] if fires else []}]
        return t

    tests = [case(r, "r1", f"0x{r.case.firing_min + 5}", fires=False) for r in rules]
    r = a.rule("precursor-oversized-updates")  # the join is the same in all eight: the other sides on one
    m = r.case.firing_min
    tests += [case(r, "another-run", f"0x{m + 5}", fires=True),
              case(r, "r1", f"0x{m - 10} stale", fires=True)]  # gone over 5 minutes before: stale
    doc = {"rule_files": [str(DASHBOARDS / "alerts.yaml")], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "defer_test.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([need("promtool"), "test", "rules", "defer_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout[-3000:] + out.stderr[-2000:]


def test_heartbeat_lost_is_measured_by_the_runs_own_steps(tmp_path):
    """trainer_ref's trainer beats once a step, its grader once a batch: with steps of 5 minutes the fixed 120 s
    silence paged every healthy run, and a grader idle through a long held-out evaluation paged too. The rule now
    also waits for the run's no-progress allowance (5 step intervals, plus the pause allowance during a declared
    pause). promtool on the committed rule: 5-minute steps page nobody; the same trainer stuck at 30m pages at 57m
    (25 minutes of silence, then the rule's 1 minute), its grader still beating does not; a grader silent through a
    declared 12-minute evaluation does not page (its driver beats at each step's weight sync, as trainer_ref's does)."""
    r = a.rule("heartbeat-lost")
    slow = list(range(5, 61, 5))

    def case(name: str, series: list[dict], checks: dict[int, str | None]) -> dict:
        alert = {**r.labels, "run": "r1", "component": "trainer", "rank": "0", "instance": "127.0.0.1:9101"}

        def exp(value: str | None) -> list[dict]:
            return [] if value is None else [{"exp_labels": alert, "exp_annotations": {
                k: a._render(v, alert, value, "train") for k, v in r.annotations().items()}}]

        return {"name": name, "interval": "1m", "input_series": series,
                "alert_rule_test": [{"eval_time": f"{m}m", "alertname": r.name, "exp_alerts": exp(v)}
                                    for m, v in checks.items()]}

    stuck = [x for x in slow if x <= 30]
    evaluating = list(range(1, 11)) + list(range(23, 41))
    doc = {"rule_files": [str(DASHBOARDS / "alerts.yaml")], "evaluation_interval": "1m", "tests": [
        case("5-minute steps: no page", _trainer_with_pauses(60, slow, [], step_s=300)[:4]
             + _beats(60, slow, "trainer", "train") + _beats(60, [m + 1 for m in slow], "grader", "grade"),
             {9: None, 20: None, 40: None, 58: None}),
        case("5-minute steps, the trainer stuck at 30m: paged after 25 minutes", _trainer_with_pauses(
            60, stuck, [], step_s=300)[:4] + _beats(60, stuck, "trainer", "train")
             + _beats(60, [m + 1 for m in slow], "grader", "grade"), {50: None, 55: None, 58: "28m 0s"}),
        case("a grader idle through a declared 12-minute evaluation: no page",
             _trainer_with_pauses(40, evaluating, [(0, 2), (10, 22)]) + _beats(40, evaluating, "trainer", "train")
             + _beats(40, evaluating, "grader", "grade") + _beats(40, evaluating, "driver", "sync", up=False),
             {14: None, 18: None, 22: None, 30: None})]}
    (tmp_path / "silence_test.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([need("promtool"), "test", "rules", "silence_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_staleness_over_bound_reads_the_bounds_basis(tmp_path):
    """trainer_ref's completion basis bounds the group's newest token version; a resumed group's first tokens are
    older by design. The thirty-eighth early-warning run's healthy completion-basis runs: dispatch staleness 6-7,
    the bounded one at most 2. The alert reads ``rlobs_staleness_bounded_max_versions`` where the run exports it
    and the dispatch gauge elsewhere. A real promtool evaluates the committed rule at 10 minutes."""
    labels = {**a.CASE_LABELS}

    def sel(name: str) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"

    def case(name: str, dispatch: str, bounded: str | None, fires: bool, value: str = "") -> dict:
        series = [{"series": sel("rlobs_staleness_max_versions"), "values": dispatch},
                  {"series": sel("up"), "values": "1x12"}]
        if bounded is not None:
            series.append({"series": sel("rlobs_staleness_bounded_max_versions"), "values": bounded})
        r = a.rule("staleness-over-bound")
        alert = {**r.labels, "run": "r1", "component": "trainer"}
        got = [{"exp_labels": alert, "exp_annotations": {k: a._render(v, alert, value)
                                                         for k, v in r.annotations().items()}}] if fires else []
        return {"name": name, "interval": "1m", "input_series": series,
                "alert_rule_test": [{"eval_time": "10m", "alertname": r.name, "exp_alerts": got}]}

    doc = {"rule_files": [str(DASHBOARDS / "alerts.yaml")], "evaluation_interval": "1m", "tests": [
        case("completion basis: dispatch 7, bounded 2", "7x12", "2x12", fires=False),
        case("completion basis: the bounded staleness over the bound", "7x12", "6x12", fires=True, value="6"),
        case("dispatch basis (no bounded gauge): dispatch 7", "7x12", None, fires=True, value="7"),
        case("dispatch basis: within the bound", "2x12", None, fires=False)]}
    (tmp_path / "basis_test.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([need("promtool"), "test", "rules", "basis_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_uncorrected_off_policy_far_leg_fires_before_the_median_far_behind_only(tmp_path):
    """The doctor's far leg, live: staleness-no-is-s74's real per-step ESS and staleness (the forty-ninth
    early-warning run; held-out success fell at the step-10 evaluation) at a step every 2 minutes, scraped every 30 s,
    into a real promtool. At the end of step 9 the committed expression has fired on two of the last five steps under
    0.8 (0.57 at step 5, 0.72 at 8) at a median staleness of 6.9, where the median alone (0.84) is not under the bar:
    the same rule with the far leg out of reach is silent. The same ratios with the staleness held at 4 (the lag-4
    family's bound) fire neither."""
    from rlobs.failures import thresholds
    from tests.early_warning.test_precursors import S74_ESS, S74_STALENESS

    r = a.rule("precursor-uncorrected-off-policy")
    far = f">= {thresholds(r.id)['far_staleness']:g})"
    assert r.expr.count(far) == 1
    per = 4  # scrapes per step

    def sel(name: str, run: str) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in {**a.CASE_LABELS, "run": run}.items()) + "}"

    def vals(xs: list[float]) -> str:
        return " ".join(" ".join([f"{v:.9g}"] * per) for v in xs)

    series = []
    for run, stale in (("r1", S74_STALENESS), ("lag4", [min(4.0, x) for x in S74_STALENESS])):
        series += [{"series": sel("rlobs_effective_sample_size_ratio", run), "values": vals(S74_ESS)},
                   {"series": sel("rlobs_staleness_mean_versions", run), "values": vals(stale)},
                   {"series": sel("rlobs_importance_correction_cap", run), "values": vals([0.0] * len(S74_ESS))},
                   {"series": sel("rlobs_train_step_last_timestamp_seconds", run),
                    "values": vals([120.0 * i for i in range(len(S74_ESS))])},
                   {"series": sel("up", run), "values": vals([1] * len(S74_ESS))}]
    (tmp_path / "variant.yaml").write_text(yaml.safe_dump({"groups": [{"name": "variant", "rules": [
        {"alert": "Committed", "for": r.for_, "expr": r.expr},
        {"alert": "MedianOnly", "for": r.for_, "expr": r.expr.replace(far, ">= 1e9)")}]}]}))
    end4, end9 = 120 * 4 + 90, 120 * 9 + 90  # the last scrape of steps 4 and 9
    r1 = [{"exp_labels": {"alertname": "Committed", "run": "r1", "component": "trainer"}}]
    tests = [{"eval_time": f"{end4}s", "alertname": "Committed", "exp_alerts": []},
             {"eval_time": f"{end9}s", "alertname": "Committed", "exp_alerts": r1},
             {"eval_time": f"{end9}s", "alertname": "MedianOnly", "exp_alerts": []}]
    doc = {"rule_files": ["variant.yaml"], "evaluation_interval": "30s",
           "tests": [{"name": "staleness-no-is-s74", "interval": "30s", "input_series": series,
                      "alert_rule_test": tests}]}
    (tmp_path / "far_test.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([need("promtool"), "test", "rules", "far_test.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_drift_alerts_wait_for_the_doctors_reference_steps_on_a_slow_start(tmp_path):
    """A real healthy run's first 20 steps (tests/early_warning/data/grad_norm_slow_start.json: healthy-long-s50,
    which learned and never fell) at its own pace (its wall gaps, the run's mean gap scaled to 2 minutes, scraped every
    30 s) into a real promtool. Its first steps were slower than its mean, so at step 4-5 the window before holds 2-4
    steps, and step 4's grad norm (10.3 against 0.29-0.45 before it), held through the held-out evaluation after it,
    is the recent window's median: the rule without its reference-steps guard pages it there, as the live replay of
    the forty-ninth early-warning run did at the run's own pace. The committed rule, like the doctor's detector, judges
    only once the window before holds ``baseline`` steps, and is quiet throughout (step 18's single spike of 8.7 is
    no median)."""
    import json

    from rlobs.failures import thresholds

    steps = json.loads((Path(__file__).resolve().parents[1] / "early_warning" / "data"
                        / "grad_norm_slow_start.json").read_text())["steps"]
    def guard(fid: str) -> str:
        w = a.PRECURSOR_WINDOWS
        return f" and on (run, component) {a._reference_steps(w['recent'], w['history'], thresholds(fid)['baseline'])}"

    # the four drift alerts (the doctor's fast-drift detectors: lag, baseline) carry it; the levels and KL's rate do not
    drifts = ("precursor-grad-norm-drift", "precursor-entropy-decline", "precursor-importance-truncation",
              "precursor-zero-std-rising")
    assert all(a.rule(fid).expr.count(guard(fid)) == 1 for fid in drifts)
    r = a.rule("precursor-grad-norm-drift")
    scrapes = [max(1, round(4 * x["gap"])) for x in steps]  # 4 scrapes (2 minutes) a mean gap
    t0 = [30 * sum(scrapes[:i]) for i in range(len(steps))]  # each step's time, seconds

    def sel(name: str) -> str:
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in a.CASE_LABELS.items()) + "}"

    def vals(xs: list[float]) -> str:
        return " ".join(" ".join([f"{v:.9g}"] * n) for v, n in zip(xs, scrapes))

    series = [{"series": sel("rlobs_grad_norm"), "values": vals([x["grad_norm"] for x in steps])},
              {"series": sel("rlobs_train_steps_total"), "values": vals([x["step"] + 1 for x in steps])},
              {"series": sel("rlobs_train_step_last_timestamp_seconds"), "values": vals(t0)},
              {"series": sel("up"), "values": vals([1] * len(steps))}]
    end = 30 * sum(scrapes)
    unguarded = r.expr.replace(guard(r.id), "")
    firing = set(range(1140, 1410, 30))  # 19-23 minutes: steps 5-7 (pending at step 5, a `for` of 1 minute)
    assert t0[5] <= min(firing) and max(firing) < t0[8], t0
    _quiet_where_variant_pages(tmp_path, "healthy-long-s50, its own pace", r, "Unguarded", unguarded, series,
                               range(60, end, 30), firing)


def test_oversized_updates_reads_learning_from_the_runs_start_not_the_hour_before(tmp_path):
    """A real healthy run that never learned (tests/early_warning/data/oversized_noisy_reward.json: healthy-tiny-s231,
    held-out success flat at 0.30-0.34 but 0.17 at its step-30 evaluation, training reward 0.22-0.67 step to step)
    at a step every 2 minutes into a real promtool. The rule as it was until the fifty-third early-warning run, whose
    "the run has learned" read the low decile of the hour before's reward and the lowest evaluation of that hour,
    pages it at step 56 (a dip and its recovery read as a climb), as the live replay of the fifty-second run did; the
    committed rule compares with the exporter's baselines (the median reward of the first 5 steps, the first
    evaluation), as the doctor compares with the run's first steps, and is quiet throughout."""
    import json

    from rlobs.failures import thresholds

    steps = json.loads((Path(__file__).resolve().parents[1] / "early_warning" / "data"
                        / "oversized_noisy_reward.json").read_text())["steps"]
    r = a.rule("precursor-oversized-updates")
    o = thresholds(r.id)
    now, hist = a.PRECURSOR_WINDOWS["recent"], a.PRECURSOR_WINDOWS["history"]
    reward, held = (a._over_time("avg_over_time", "rlobs_reward_mean", now),
                    a._over_time("max_over_time", "rlobs_heldout_success", now))
    committed = a.oversized_learned(now, o)
    hour_before = (f"({reward} >= {a._over_time('quantile_over_time', 'rlobs_reward_mean', hist, now, q=0.1)} + "
                   f"{o['reward_gain']:g})",
                   f"({held} >= {a._over_time('min_over_time', 'rlobs_heldout_success', hist, now)} + "
                   f"{o['heldout_gain']:g})")
    assert all(r.expr.count(x) == 1 for x in committed)
    variant = r.expr.replace(committed[0], hour_before[0]).replace(committed[1], hour_before[1])
    firing = {6780, 6810}  # step 56 (a step is 120 s), pending a `for` (1 minute) before
    _quiet_where_variant_pages(tmp_path, "healthy-tiny-s231", r, "HourBefore", variant, _oversized_series(steps),
                               range(60, 30 * 4 * len(steps), 30), firing)


def test_oversized_updates_reads_entropy_and_held_out_success_as_the_doctor_does(tmp_path):
    """Three real healthy `tiny` runs the live replay paged by RlobsPrecursorOversizedUpdates where the doctor was
    quiet (tests/early_warning/data/oversized_live_tiny.json; none fell after), at a step every 2 minutes into a real
    promtool. The rule of the fifty-sixth early-warning run (entropy against the hour before's highest reading, the
    training reward's climb with no held-out floor, held-out success's best of the last 10 minutes) pages each:
    s300 at step 9, s290 at 38, s322 at 44. The committed rule reads them as the doctor's rule does (the exporter's
    rlobs_policy_entropy_baseline, rlobs_heldout_success_best and _recent) and is quiet on all three; each change
    alone is what quiets its run: the held-out floor s300's (training reward +0.15, held-out success never over its
    first evaluation), the recent held-out level s290's (+0.18 at its best, +0.149 over its last two), the entropy's
    early level s322's (0.59 of the hour before's highest, 1.7x its first 5 steps' median)."""
    import json

    from rlobs.failures import thresholds

    runs = json.loads((Path(__file__).resolve().parents[1] / "early_warning" / "data"
                       / "oversized_live_tiny.json").read_text())["runs"]
    r = a.rule("precursor-oversized-updates")
    o = thresholds(r.id)
    now, hist = a.PRECURSOR_WINDOWS["recent"], a.PRECURSOR_WINDOWS["history"]

    def base(name: str) -> str:
        return a.agg("max", a.series(name, a.ALERT), a.GROUP)

    reward, held = a.oversized_learned(now, o)
    entropy = base("rlobs_policy_entropy_baseline")
    assert (r.expr.count(entropy), r.expr.count(reward), r.expr.count(held)) == (2, 1, 1)  # entropy: in both legs
    entropy_before = a._over_time("max_over_time", "rlobs_policy_entropy", hist, now)
    reward_before = (f"({a._over_time('avg_over_time', 'rlobs_reward_mean', now)} >= "
                     f"{base('rlobs_reward_baseline')} + {o['reward_gain']:g})")
    held_before = (f"({a._over_time('max_over_time', 'rlobs_heldout_success', now)} >= "
                   f"{base('rlobs_heldout_success_baseline')} + {o['heldout_gain']:g})")
    before = r.expr.replace(entropy, entropy_before).replace(reward, reward_before).replace(held, held_before)
    floor_alone = r.expr.replace(entropy, entropy_before).replace(held, held_before)
    cases = [  # run, variant, its expression, the evaluation seconds it fires at (a step is 120 s; `for` 1 minute)
        ("healthy-tiny-s300", "FiftySixth", before, {1140, 1170}),
        ("healthy-tiny-s300", "FloorAlone", floor_alone, set()),
        ("healthy-tiny-s290", "FiftySixth", before, {4620, 4650}),
        ("healthy-tiny-s290", "BestOfTheWindow", r.expr.replace(held, held_before), {4620, 4650}),
        ("healthy-tiny-s322", "FiftySixth", before, set(range(5340, 6000, 30))),
        ("healthy-tiny-s322", "HourBeforesEntropy", r.expr.replace(entropy, entropy_before), {5340, 5370})]
    for run, name, expr, firing in cases:
        steps = runs[run]["steps"]
        _quiet_where_variant_pages(tmp_path, run, r, name, expr, _oversized_series(steps),
                                   range(60, 30 * 4 * len(steps), 30), firing)
