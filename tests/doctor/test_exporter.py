"""rlobs.doctor.exporter on a real record: what one evaluation serves, and a watcher that starts before the run."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

import rlobs
from bench.early_warning_live import emit_step
from rlobs.catalogue import all_exposed_names
from rlobs.doctor.exporter import DoctorWatcher

DATA = Path(__file__).resolve().parents[1] / "early_warning" / "data" / "collapse_runs.json"


def _scrape(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_a_watcher_started_before_the_record_serves_each_finding_with_its_onset(tmp_path):
    run = tmp_path / "run"
    watcher = DoctorWatcher([run], interval=60)  # evaluate() by hand: no thread
    try:
        assert watcher.evaluate(run) is None and not watcher.exporters  # no record yet: nothing served
        r = json.loads(DATA.read_text())["runs"]["kl-blow-up-partial-s0"]
        rec = rlobs.init(run, component="trainer", rank=0, run_id="exp-kl", set_global=False, flush_interval=0.1)
        for row in r["steps"]:
            emit_step(rec, row)
        rec.flush()
        verdict = watcher.evaluate(run)
        assert verdict is not None and verdict.judged_step == 9
        exporter = watcher.exporters[run]
        assert exporter.url.startswith("http://127.0.0.1:")
        (target,) = json.loads(next((run / "prometheus_sd").glob("doctor-*.json")).read_text())
        assert target["labels"]["component"] == "doctor" and target["labels"]["run"] == "exp-kl"
        families = _scrape(exporter.url)
        names = {s.name for samples in families.values() for s in samples}
        assert names <= all_exposed_names(), names - all_exposed_names()
        found = {s.labels["rule"]: s.value for s in families["rlobs_doctor_finding"]}
        onset = {s.labels["rule"]: s.value for s in families["rlobs_doctor_finding_first_step"]}
        # step 9: the creep alarms at 8 and 9 (two alarms running, the forty-third early-warning run)
        assert found.get("precursor-kl-creep") == 1 and onset["precursor-kl-creep"] == 9
        assert all(s.labels["run"] == "exp-kl" and s.labels["component"] == "doctor"
                   for samples in families.values() for s in samples)
        evals = {s.labels["outcome"]: s.value for s in families["rlobs_doctor_evaluations"]
                 if s.name == "rlobs_doctor_evaluations_total"}
        assert evals == {"ok": 1.0, "error": 0.0}
        assert families["rlobs_doctor_judged_steps"][0].value == 9
        assert families["rlobs_doctor_interval_seconds"][0].value == 60  # RlobsDoctorBehind's yardstick
        rec.close()  # the run ends: judged a last time, its exporter closed with its target file
        assert watcher.evaluate(run) is not None and run in watcher.done
        assert not list((run / "prometheus_sd").glob("doctor-*.json"))
    finally:
        watcher.close()


def test_follow_keeps_watching_through_a_record_it_cannot_read_for_a_moment(tmp_path):
    """`rlobs doctor --follow --metrics-port`: a record that cannot be opened for a few evaluations (moved away and
    back, as a copy or a remount does) is an error printed and counted, not the end of the watcher; the run's end
    still ends it."""
    import re
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    rec = rlobs.init(run, component="trainer", rank=0, run_id="exp-follow", set_global=False, flush_interval=0.1)
    r = json.loads(DATA.read_text())["runs"]["kl-blow-up-partial-s0"]
    for row in r["steps"]:
        emit_step(rec, row)
    rec.flush()
    proc = subprocess.Popen([sys.executable, "-m", "rlobs", "doctor", str(run), "--follow", "--interval", "0.2",
                             "--json", "--metrics-port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        served = proc.stderr.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/metrics", served)
        assert url, served
        assert json.loads(proc.stdout.readline())["findings"]  # the first evaluation
        run.rename(tmp_path / "away")
        time.sleep(1.0)  # ~4 evaluations find no record
        (tmp_path / "away").rename(run)
        assert proc.poll() is None  # still following
        errors = {s.labels["outcome"]: s.value for s in _scrape(url[0])["rlobs_doctor_evaluations"]
                  if s.name == "rlobs_doctor_evaluations_total"}
        assert errors["error"] >= 2 and errors["ok"] >= 1, errors
        rec.close()  # the run ends: the doctor's follow loop ends with it
        rec = None
        assert proc.wait(timeout=30) == 1  # the KL-creep warning
        assert "error: " in proc.stderr.read()
    finally:
        if rec is not None:
            rec.close()
        if proc.poll() is None:
            proc.kill()


def test_a_rule_with_several_findings_is_one_series_at_its_earliest_onset():
    """A rule may report several findings (one per sync boundary, per grader kind); a repeated label set would make
    Prometheus reject the whole scrape, so each (rule, severity) is one series, at its earliest onset."""
    from prometheus_client import CollectorRegistry, generate_latest

    from rlobs.doctor.exporter import Verdict, _VerdictCollector

    collector = _VerdictCollector("exp-many", interval=5.0)
    collector.update(Verdict((("weight-sync-slow", "warning", 12), ("weight-sync-slow", "warning", 4),
                              ("weight-sync-slow", "warning", None), ("no-gradient", "info", None)), 20, 1.0, 0.1))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    families = {f.name: f.samples for f in text_string_to_metric_families(generate_latest(registry).decode())}
    found = [(s.labels["rule"], s.labels["severity"]) for s in families["rlobs_doctor_finding"]]
    assert sorted(found) == [("no-gradient", "info"), ("weight-sync-slow", "warning")]
    assert [(s.labels["rule"], s.value) for s in families["rlobs_doctor_finding_first_step"]] == [("weight-sync-slow", 4)]


def test_a_doctor_that_has_not_judged_yet_serves_when_it_started():
    """Before its first evaluation the exporter serves no last-evaluation time, only its start, which
    RlobsDoctorBehind counts from; after one it serves both."""
    import time

    from prometheus_client import CollectorRegistry, generate_latest

    from rlobs.doctor.exporter import Verdict, _VerdictCollector

    t0 = time.time()
    collector = _VerdictCollector("exp-slow", interval=5.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)

    def scrape() -> dict[str, list]:
        return {f.name: f.samples for f in text_string_to_metric_families(generate_latest(registry).decode())}

    families = scrape()
    (started,) = families["rlobs_doctor_started_timestamp_seconds"]
    assert t0 <= started.value <= time.time()
    assert not families["rlobs_doctor_last_evaluation_timestamp_seconds"]
    collector.update(Verdict((), 3, started.value + 7.0, 0.1))
    families = scrape()
    assert families["rlobs_doctor_last_evaluation_timestamp_seconds"][0].value == started.value + 7.0
    assert families["rlobs_doctor_started_timestamp_seconds"][0].value == started.value


def test_the_watcher_rests_as_long_as_a_pass_took_so_it_never_holds_a_core(tmp_path):
    """An interval shorter than an evaluation (a long record, many runs, or a too-eager --doctor-interval) must not
    turn the watcher into a busy loop on the trainer's host: after each pass it waits at least as long as the pass
    took, so it is busy at most about half the time; with ``rest=0`` (the bench's uncapped watcher) it runs back to
    back. Real evaluations of a real record, timed."""
    import time

    run = tmp_path / "run"
    r = json.loads(DATA.read_text())["runs"]["kl-blow-up-partial-s0"]
    rec = rlobs.init(run, component="trainer", rank=0, run_id="exp-busy", set_global=False, flush_interval=0.1)
    for row in r["steps"]:
        emit_step(rec, row)
    rec.flush()
    busy = {}
    try:
        for rest in (1.0, 0.0):
            verdicts: list = []
            watcher = DoctorWatcher([run], interval=0.001, verdicts=verdicts, rest=rest).start()
            t0 = time.monotonic()
            time.sleep(3.0)
            watcher.close()
            elapsed = time.monotonic() - t0
            assert len(verdicts) >= 3, verdicts
            busy[rest] = sum(v.seconds for _, v in verdicts) / elapsed
            if rest:
                ends = [v.ended_at for _, v in verdicts]
                gaps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
                # each gap holds the rest after one pass (>= its length) and the next pass
                assert all(g >= 0.9 * (v.seconds + w.seconds) for g, (_, v), (_, w)
                           in zip(gaps, verdicts, verdicts[1:], strict=False)), (gaps, verdicts)
    finally:
        rec.close()
    assert busy[1.0] <= 0.6 < busy[0.0], busy
