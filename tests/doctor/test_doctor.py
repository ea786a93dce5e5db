"""The doctor on recorded scenarios (tests/doctor/scenarios.py): every fault found, ranked and timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import rlobs
from rlobs import exitcodes
from rlobs.cli import app
from rlobs.doctor import Evidence, Finding, Severity, diagnose, rank, registry
from rlobs.doctor.model import RUNBOOKS_DIR
from tests.doctor import scenarios

ALWAYS_ONE_STEP = {"nan_grad", "incomplete_dump", "torn_read", "fingerprint_mismatch", "cache_not_reset"}


@pytest.fixture(scope="session")
def scenario_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("scenarios")


_built: dict[tuple[str, int], Path] = {}


def scenario(root: Path, name: str, seed: int = 0) -> Path:
    key = (name, seed)
    if key not in _built:
        _built[key] = scenarios.build(root / f"{name}-{seed}", None if name == "healthy" else name, seed=seed)
    return _built[key]


def _diagnose(path: Path, **kw):
    with rlobs.open_run(path) as record:
        return diagnose(record, **kw)


@pytest.mark.parametrize("fault", sorted(scenarios.FAULTS))
def test_each_fault_is_the_top_root_cause_and_found_in_time(scenario_root, fault):
    expected, max_delay = scenarios.FAULTS[fault]
    report = _diagnose(scenario(scenario_root, fault))
    assert report.findings, f"{fault}: no findings"
    top = report.findings[0]
    assert top.rule == expected, [(f.rule, f.explained_by) for f in report.findings]
    assert top.explained_by is None
    delay = max(0, (top.first_step if top.first_step is not None else 10**9) - scenarios.ONSET)
    assert delay <= (1 if fault in ALWAYS_ONE_STEP else max_delay), (top.first_step, scenarios.ONSET)
    if fault == "grad_spike":  # clipped (grad_norm_clipped = 1.0) and the loss kept its level: info, not a page
        assert top.severity == Severity.INFO and "clipped; the run kept its trend" in top.title, top.title
    else:
        assert report.exit_code in (1, 2)
    assert (RUNBOOKS_DIR / f"{top.rule}.md").is_file()
    assert not report.errors


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_healthy_runs_with_noise_have_no_warning_or_critical_finding(scenario_root, seed):
    report = _diagnose(scenario(scenario_root, "healthy", seed))
    assert [f for f in report.findings if f.severity >= Severity.WARNING] == []
    assert report.exit_code == 0
    assert not report.errors


def test_symptoms_are_explained_by_their_cause(scenario_root):
    report = _diagnose(scenario(scenario_root, "torn_read"))
    by_rule = {f.rule: f for f in report.findings}
    assert by_rule["weight-sync-fingerprint-mismatch"].explained_by == "weight-sync-torn-read"
    assert "weight-sync-fingerprint-mismatch" in by_rule["weight-sync-torn-read"].explains
    chain = by_rule["weight-sync-fingerprint-mismatch"].chain
    assert chain[0].startswith("weight-sync-fingerprint-mismatch") and chain[-1].startswith("weight-sync-torn-read")


def test_rank_orders_causes_before_symptoms_and_is_deterministic():
    rules = registry()

    def f(rule, sev, step):
        return Finding(rule, sev, rule, step, step, [Evidence("m", 1)], "c", 0.5, [])

    spike = f("grad-norm-spike", Severity.CRITICAL, 812)
    collapse = f("advantage-denominator-collapse", Severity.WARNING, 811)
    drift = f("parity-drift", Severity.WARNING, 3)
    ranked = rank([spike, drift, collapse], rules)
    assert [x.rule for x in ranked] == ["parity-drift", "advantage-denominator-collapse", "grad-norm-spike"] or \
        [x.rule for x in ranked] == ["advantage-denominator-collapse", "parity-drift", "grad-norm-spike"]
    assert ranked[-1].explained_by == "advantage-denominator-collapse"
    # a cause that starts long after the symptom explains nothing
    late = f("advantage-denominator-collapse", Severity.WARNING, 900)
    spike2 = f("grad-norm-spike", Severity.CRITICAL, 812)
    rank([spike2, late], rules)
    assert spike2.explained_by is None


def test_every_rule_has_a_runbook_and_documented_thresholds():
    for rid, r in registry().items():
        page = RUNBOOKS_DIR / f"{rid}.md"
        assert page.is_file(), f"rule {rid} has no runbook {page}"
        assert r.doc, rid
        for name, value in r.thresholds.items():
            assert isinstance(value, (int, float)), (rid, name)


def test_empty_record_is_insufficient_data_not_healthy(tmp_path):
    rec = rlobs.init(tmp_path / "empty", component="trainer", prometheus=False, set_global=False)
    rec.close()
    report = _diagnose(tmp_path / "empty")
    assert report.findings == [] and report.exit_code == 0 and not report.errors
    assert "no train_step events" in report.insufficient["grad-norm-nonfinite"]
    assert set(report.insufficient) | set(report.healthy) == set(registry())


def test_damaged_record_is_reported_not_fatal(scenario_root, tmp_path):
    import shutil

    src = scenario(scenario_root, "healthy", 0)
    dst = tmp_path / "damaged"
    shutil.copytree(src, dst)
    victim = sorted((dst / "events" / "train_step").glob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:100])  # cut the file: unreadable
    (dst / "processes" / next(iter(sorted(p.name for p in (dst / "processes").iterdir())))).unlink()
    report = _diagnose(dst)
    damaged = [f for f in report.findings if f.rule == "record-damaged"]
    assert damaged and "damaged segment" in damaged[0].title
    assert not report.errors


def test_telemetry_drops_are_reported(tmp_path):
    class Broken:
        name = "broken"

        def write(self, batch):
            raise OSError("read-only file system")

        def flush(self):
            pass

        def close(self):
            pass

    rec = rlobs.init(tmp_path / "drops", component="trainer", prometheus=False, set_global=False, sinks=[Broken()])
    for i in range(50):
        rec.emit("heartbeat", phase="train", step=i)
    rec.close()
    report = _diagnose(tmp_path / "drops", rule_ids=["telemetry-drops"])
    (finding,) = report.findings
    assert finding.rule == "telemetry-drops" and "sink_error@broken" in finding.title


def test_silent_component_is_reported_with_its_last_phase(tmp_path):
    import time

    a = rlobs.init(tmp_path / "hb", component="grader", prometheus=False, set_global=False)
    b = rlobs.init(tmp_path / "hb", component="trainer", prometheus=False, set_global=False)
    a.heartbeat("grade")
    a.flush()
    time.sleep(0.6)
    b.heartbeat("train")
    b.flush()
    b.close()  # the grader never closes: it hangs
    report = _diagnose(tmp_path / "hb", rule_ids=["heartbeat-lost"], thresholds={"heartbeat-lost": {"silence_s": 0.5}})
    (finding,) = report.findings
    assert "grader" in finding.title and "'grade'" in finding.title
    a.close()


@pytest.mark.parametrize("step_seconds,silent", [(1.0, False), (0.05, True)])
def test_a_trainer_silent_for_less_than_its_runs_step_allowance_is_not_lost(tmp_path, step_seconds, silent):
    """A trainer beats once a step: with steps that take minutes the fixed silence read every healthy run as stuck.
    The limit is the longer of ``silence_s`` and the no-progress allowance (5 x optimiser-plus-data-wait seconds per
    step). Real recorders, silence_s 0.5 s, the trainer 0.6 s silent while the generator goes on: steps of 1 s
    (allowance 5 s) are not a finding; steps of 0.05 s (allowance 0.25 s, the floor 0.5 s binds) are."""
    import time

    t = rlobs.init(tmp_path / "hb", component="trainer", prometheus=False, set_global=False)
    g = rlobs.init(tmp_path / "hb", component="generator", prometheus=False, set_global=False)
    for _ in range(3):
        t.heartbeat("train")
        t.emit("train_step", loss=0.0, grad_norm=1.0, step_seconds=step_seconds, data_wait_s=0.0)
    t.flush()
    time.sleep(0.6)
    g.heartbeat("generate")
    g.close()
    report = _diagnose(tmp_path / "hb", rule_ids=["heartbeat-lost"], thresholds={"heartbeat-lost": {"silence_s": 0.5}})
    assert [f.rule for f in report.findings] == (["heartbeat-lost"] if silent else []), report.findings
    t.close()


def test_since_step_limits_the_judged_steps(scenario_root):
    path = scenario(scenario_root, "grad_spike")
    assert _diagnose(path, rule_ids=["grad-norm-spike"]).findings
    assert _diagnose(path, rule_ids=["grad-norm-spike"], since_step=scenarios.ONSET + 1).findings == []


# ---------------------------------------------------------------- CLI
def test_cli_json_is_deterministic_and_exit_codes_follow_severity(scenario_root):
    runner = CliRunner()
    path = str(scenario(scenario_root, "nan_grad"))
    a = runner.invoke(app, ["doctor", path, "--json"])
    b = runner.invoke(app, ["doctor", path, "--json"])
    assert a.exit_code == 2 and a.output == b.output
    data = json.loads(a.output)
    assert data["findings"][0]["rule"] == "grad-norm-nonfinite"
    runbook = Path(data["findings"][0]["runbook"])  # the installed page on this machine: it exists
    assert runbook.name == "grad-norm-nonfinite.md" and runbook.is_file()
    team = runner.invoke(app, ["doctor", path, "--json"], env={"RLOBS_RUNBOOK_BASE_URL": "https://wiki.example/rb"})
    assert json.loads(team.output)["findings"][0]["runbook"] == "https://wiki.example/rb/grad-norm-nonfinite.md"
    flag = runner.invoke(app, ["doctor", path, "--json", "--runbook-base-url", "https://docs.example/runbooks/"])
    assert json.loads(flag.output)["findings"][0]["runbook"] == "https://docs.example/runbooks/grad-norm-nonfinite.md"
    healthy = runner.invoke(app, ["doctor", str(scenario(scenario_root, "healthy", 0)), "--json"])
    assert healthy.exit_code == 0
    warn = runner.invoke(app, ["doctor", str(scenario(scenario_root, "slow_transfer")), "--json"])
    assert warn.exit_code == 1


def test_cli_markdown_rule_and_list(scenario_root):
    runner = CliRunner()
    path = str(scenario(scenario_root, "cache_not_reset"))
    md = runner.invoke(app, ["doctor", path, "--markdown", "--rule", "weight-sync-cache-not-reset"])
    assert md.exit_code == 2
    assert md.output.startswith("# rlobs doctor") and "runbooks/weight-sync-cache-not-reset.md" in md.output
    listed = runner.invoke(app, ["doctor", "--list-rules", "--json"])
    assert set(json.loads(listed.output)) == set(registry())


def test_cli_bad_input_is_a_clear_error(scenario_root, tmp_path):
    runner = CliRunner()
    path = str(scenario(scenario_root, "healthy", 0))
    for args, needle in [(["--rule", "nope"], "unknown rule"), (["--threshold", "grader-slow.ratio=abc"], "RULE.NAME=NUMBER"),
                         (["--threshold", "grader-slow.nope=1"], "has no threshold")]:
        res = runner.invoke(app, ["doctor", path, *args])
        assert res.exit_code == exitcodes.USAGE and needle in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["doctor", str(tmp_path / "missing")])
    assert res.exit_code == exitcodes.INPUT and "does not exist" in res.output
    res = runner.invoke(app, ["doctor", path, "--no-such-flag"])
    assert res.exit_code == exitcodes.USAGE


def test_cli_follow_reevaluates_a_run_being_written(tmp_path):
    run = tmp_path / "live"
    rec = rlobs.init(run, component="trainer", prometheus=False, set_global=False, flush_interval=0.05)
    rec.emit("train_step", step=0, grad_norm=1.0)
    rec.flush()
    proc = subprocess.Popen([sys.executable, "-m", "rlobs", "doctor", str(run), "--json", "--follow", "--interval", "0.3",
                             "--max-iterations", "40", "--rule", "grad-norm-nonfinite"], stdout=subprocess.PIPE, text=True)
    first = json.loads(proc.stdout.readline())  # JSON Lines: one report per line, the first before the run goes bad
    assert first["findings"] == []
    rec.emit("train_step", step=1, grad_norm=float("nan"), nonfinite=True)
    rec.flush()
    changed = proc.stdout.readline()  # the next report that differs shows the new finding, on one line
    proc.kill()
    proc.wait(30)
    rec.close()
    assert json.loads(changed)["findings"][0]["rule"] == "grad-norm-nonfinite"
