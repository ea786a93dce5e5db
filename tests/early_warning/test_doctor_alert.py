"""The doctor's own verdict, live: ``rlobs doctor RUN --follow --metrics-port 0`` serves its findings, a real
Prometheus scrapes them through the run's file_sd target and ``RlobsDoctorPrecursor`` fires on a real collapse run's
precursor, at the doctor's onset step; a healthy run draws nothing, and a run that ends takes the alert with it.

The records are written by a real rlobs recorder from the per-step signals of real ``trainer_ref`` runs
(``data/collapse_runs.json``, as ``test_precursor_alerts.py`` replays them); the recorder stays open while the
doctor watches (the trainer is up), then closes as a trainer does at the end of its run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import rlobs
from bench.early_warning_live import emit_step
from rlobs.dashboards.alerts import rule, runbook_url
from rlobs.dashboards.observe import LocalPrometheus
from rlobs.doctor import diagnose

from ..dashboards.conftest import interrupt_and_read, need

pytestmark = pytest.mark.slow

DATA = Path(__file__).with_name("data") / "collapse_runs.json"
RUNS = ("staleness-no-is-s0", "healthy-s0")  # a collapse the doctor warns at step 7 (its far leg), and a healthy run
ALERT = rule("doctor-precursor").name


def _wait(what, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (got := what()):
            return got
        time.sleep(every)
    return what()


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    need("prometheus")
    data = json.loads(DATA.read_text())["runs"]
    base = tmp_path_factory.mktemp("doctor-alert")
    recs, doctors = {}, {}
    try:
        for name in RUNS:
            recs[name] = rlobs.init(base / name, component="trainer", rank=0, run_id=f"dr-{name}",
                                    set_global=False, flush_interval=0.2)
            for row in data[name]["steps"]:
                emit_step(recs[name], row, correction_cap=data[name].get("correction_cap"))
        time.sleep(1.0)  # flushed to the record
        for name in RUNS:
            doctors[name] = subprocess.Popen(
                [sys.executable, "-m", "rlobs", "doctor", str(base / name), "--follow", "--interval", "0.5",
                 "--metrics-port", "0", "--json", "--rule", "precursor-uncorrected-off-policy",
                 "--rule", "precursor-oversized-updates", "--rule", "precursor-reward-hacking"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with LocalPrometheus([base / n for n in RUNS], port=0, scrape_interval="1s") as prom:
            yield prom, base, recs, doctors
    finally:
        for rec in recs.values():
            rec.close()
        for p in doctors.values():
            if p.poll() is None:
                p.terminate()
            p.wait(timeout=30)


def _firing(prom, run: str) -> list[dict]:
    return [a for a in prom.alerts() if a["labels"]["alertname"] == ALERT and a["labels"].get("run") == run
            and a.get("state") == "firing"]


def test_the_doctor_alert_fires_at_the_doctors_onset_and_names_the_rule(watched):
    prom, base, _, _ = watched
    with rlobs.open_run(base / "staleness-no-is-s0") as record:
        onset = {f.rule: f.first_step for f in diagnose(record).findings if f.rule.startswith("precursor-")}
    assert onset == {"precursor-uncorrected-off-policy": 7}  # 9 by the median leg alone
    fired = _wait(lambda: _firing(prom, "dr-staleness-no-is-s0"), 60)
    assert fired, (prom.alerts(), prom.targets())
    (a,) = fired
    assert a["labels"]["rule"] == "precursor-uncorrected-off-policy" and a["labels"]["component"] == "doctor"
    assert a["labels"]["severity"] == "warning" and a["annotations"]["runbook_url"] == runbook_url("doctor-precursor")
    assert "reports precursor-uncorrected-off-policy since step 7:" in a["annotations"]["description"]
    # the exporter's target is a process of the run in Prometheus' eyes (component doctor), scraped clean; the
    # healthy run's doctor may have registered after the other's alert fired (a slow start on a loaded machine:
    # the target is then "unknown" until its first scrape), so wait for both to have been scraped
    def doctors_up() -> list[dict]:
        doctor = [t for t in prom.targets() if t["labels"].get("component") == "doctor"]
        return doctor if len(doctor) == len(RUNS) and all(t["health"] == "up" for t in doctor) else []

    doctor = _wait(doctors_up, 30) or [t for t in prom.targets() if t["labels"].get("component") == "doctor"]
    assert {t["labels"]["run"] for t in doctor} == {f"dr-{n}" for n in RUNS}
    assert all(t["health"] == "up" and t["scrapeUrl"].startswith("http://127.0.0.1:") for t in doctor), doctor
    for t in doctor:
        with urllib.request.urlopen(t["scrapeUrl"], timeout=5) as resp:
            body = resp.read()
        out = subprocess.run([need("promtool"), "check", "metrics"], input=body, capture_output=True, timeout=30)
        assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), out
    judged = {r["metric"]["run"]: float(r["value"][1]) for r in prom.query("rlobs_doctor_judged_steps")}
    assert judged == {"dr-staleness-no-is-s0": 39.0, "dr-healthy-s0": 39.0}
    ok = prom.query('rlobs_doctor_evaluations_total{outcome="ok"} > 0')
    assert len(ok) == 2


def test_no_doctor_alert_on_the_healthy_run(watched):
    prom, _, _, _ = watched
    assert _wait(lambda: _firing(prom, "dr-staleness-no-is-s0"), 60)  # the collapse run's has had its time
    assert not [a for a in prom.alerts() if a["labels"].get("run") == "dr-healthy-s0"
                and a["labels"]["alertname"] == ALERT]
    assert not prom.query('rlobs_doctor_finding{run="dr-healthy-s0"}')


def test_a_run_that_ends_takes_the_alert_and_the_doctor_with_it(watched):
    prom, base, recs, doctors = watched
    assert _wait(lambda: _firing(prom, "dr-staleness-no-is-s0"), 60)
    recs.pop("staleness-no-is-s0").close()  # the trainer ends cleanly: its target goes, its process is "ended"
    doctor = doctors["staleness-no-is-s0"]
    doctor.wait(timeout=30)  # the doctor's --follow sees the run end and exits with the report's code
    err = doctor.stderr.read()
    assert doctor.returncode == 1, err
    assert "serving the doctor's findings on http://127.0.0.1:" in err
    reports = [json.loads(line) for line in doctor.stdout.read().splitlines()]
    assert reports[-1]["findings"][0]["rule"] == "precursor-uncorrected-off-policy"
    assert not [p for p in (base / "staleness-no-is-s0" / "prometheus_sd").glob("*.json")]
    gone = _wait(lambda: not [a for a in prom.alerts() if a["labels"]["alertname"] == ALERT
                              and a["labels"].get("run") == "dr-staleness-no-is-s0"], 30)
    assert gone, prom.alerts()


def test_metrics_port_needs_follow_and_a_port(tmp_path):
    rec = rlobs.init(tmp_path / "run", component="trainer", rank=0, run_id="dr-usage", set_global=False)
    rec.close()
    for args, says in ((["--metrics-port", "0"], "give --follow too"),
                       (["--follow", "--metrics-port", "70000"], "0 to 65535")):
        out = subprocess.run([sys.executable, "-m", "rlobs", "doctor", str(tmp_path / "run"), *args],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 64 and says in re.sub(r"\s+", " ", out.stderr), (out.returncode, out.stderr)


def test_observe_with_the_doctor_pages_a_run_it_saw_start_and_lets_it_end(tmp_path):
    """``rlobs observe RUN``: one command for the doctor's alert (the doctor is on unless ``--no-doctor``). Started
    before the run has written anything, it judges the record once there is one, prints RlobsDoctorPrecursor firing on
    the collapse run, and when the trainer ends cleanly the doctor's target goes too, so the run is reported ended."""
    import os

    need("prometheus")
    run = tmp_path / "run"
    run.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "rlobs", "observe", str(run), "--port", "0", "--scrape-interval",
                             "1s", "--doctor-interval", "0.5"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "250"})
    lines: list[str] = []
    rec = None
    try:
        def until(pattern: str, timeout: float) -> bool:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    return False
                lines.append(line)
                if re.search(pattern, line):
                    return True
            return False

        assert until(r"the doctor judges each run every 0\.5 s", 30), lines
        time.sleep(2.0)  # the watcher finds no record yet: nothing served, nothing judged
        assert not list((run / "prometheus_sd").glob("doctor-*.json"))
        r = json.loads(DATA.read_text())["runs"]["staleness-no-is-s0"]
        rec = rlobs.init(run, component="trainer", rank=0, run_id="obs-doctor", set_global=False, flush_interval=0.2)
        for row in r["steps"]:
            emit_step(rec, row, correction_cap=r.get("correction_cap"))
        assert until(r"alert firing: RlobsDoctorPrecursor .*precursor-uncorrected-off-policy \(obs-doctor\)", 60), lines
        assert len(list((run / "prometheus_sd").glob("doctor-*.json"))) == 1
        rec.close()
        rec = None
        # in either order: the alert resolves (the trainer's target gone) and the run ends (the doctor's gone too)
        assert until(r"alert resolved: RlobsDoctorPrecursor \(run obs-doctor\)|run obs-doctor ended", 60), lines
        assert until(r"alert resolved: RlobsDoctorPrecursor \(run obs-doctor\)|run obs-doctor ended", 60), lines
        assert any("run obs-doctor ended: no process of it is left" in x for x in lines), lines
        assert any("alert resolved: RlobsDoctorPrecursor (run obs-doctor)" in x for x in lines), lines
        assert not list((run / "prometheus_sd").glob("*.json"))
        rest = interrupt_and_read(proc)
    finally:
        if rec is not None:
            rec.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "Prometheus stopped" in rest, "".join(lines) + rest
