"""Dashboards and alerts against a real Prometheus scraping a real rlobs-instrumented run.

Debian's Prometheus (via ``LocalPrometheus``, the engine of ``rlobs observe``) scrapes every process
of two runs through their ``prometheus_sd`` files: a faulty run and a healthy one. Then every panel
query of every dashboard must return data for the faulty run, the alert matching each injected fault
must be pending or firing for it and no alert for the healthy run, every series Prometheus stores
must be in the catalogue, and ``promtool check metrics`` must pass on a real scrape.

The driver is ``emit_run.py`` beside this file (realistic events for every probe family, with every
fault an alert knows); ``test_prometheus_trainer_ref.py`` does the same against the real reference
trainer with one injected fault.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from rlobs.catalogue import METRICS, all_exposed_names
from rlobs.dashboards import selectors as s
from rlobs.dashboards.alerts import ALERT_IDS, rule, runbook_url
from rlobs.doctor.exporter import DoctorWatcher
from rlobs.dashboards.build import boards
from rlobs.dashboards.observe import LocalPrometheus
from tests.status_channel import StatusPipe

from .conftest import REPO, need

pytestmark = pytest.mark.slow

EMITTER = Path(__file__).with_name("emit_run.py")
# heartbeat-lost needs two minutes of silence: its promtool case covers it, not this test.
# Alerts the synthetic emitter cannot raise in its 75 s: they need a stall, a dead process or an hour of
# baseline. tests/dashboards/test_oncall_trainer_ref.py raises them on real trainer_ref runs.
NOT_LIVE = {"heartbeat-lost", "process-down", "no-progress", "grader-slow", "trainer-starved",
            # early-warning alerts compare the last 10 min with the hour before: tests/early_warning replays real
            # trainer_ref collapse runs into a real Prometheus (windows scaled) and raises each of them
            "precursor-grad-norm-drift", "precursor-entropy-decline", "precursor-importance-truncation",
            "precursor-kl-creep", "precursor-zero-std-rising", "precursor-uncorrected-off-policy",
            "precursor-oversized-updates", "precursor-reward-hacking",
            # the doctor's own alert needs the doctor watching the run (rlobs observe runs it):
            # tests/early_warning/test_doctor_alert.py raises it on a real collapse run's record
            "doctor-precursor", "doctor-behind"}
WAIT_S = 75.0
PANEL_VARS = {"component": ".*", "__rate_interval": "1m"}


@dataclass
class InstrumentedRuns:
    """What a driver started: a faulty and a healthy run, and what the faults must raise."""

    faulty_dir: Path
    faulty_run: str
    healthy_dir: Path
    healthy_run: str
    expected_alerts: set[str]
    procs: list[subprocess.Popen] = field(default_factory=list)
    status: list[StatusPipe] = field(default_factory=list)
    summaries: dict[str, dict] = field(default_factory=dict)


@contextlib.contextmanager
def drive_synthetic(base: Path) -> Iterator[InstrumentedRuns]:
    runs = InstrumentedRuns(base / "faulty", "dash-faulty", base / "healthy", "dash-healthy",
                            expected_alerts=set(ALERT_IDS) - NOT_LIVE)
    for d, run_id, faults in ((runs.faulty_dir, runs.faulty_run, True), (runs.healthy_dir, runs.healthy_run, False)):
        cmd = [sys.executable, str(EMITTER), str(d), "--run-id", run_id, "--seconds", "150"]
        pipe = StatusPipe()
        runs.procs.append(subprocess.Popen(cmd + (["--faults"] if faults else []), **pipe.popen_kwargs()))
        pipe.started()
        runs.status.append(pipe)
    try:
        for pipe in runs.status:
            assert (pipe.read(timeout=120) or {}).get("ready")
        yield runs
    finally:
        for p in runs.procs:
            p.terminate()
        for p, pipe, run_id in zip(runs.procs, runs.status, (runs.faulty_run, runs.healthy_run)):
            runs.summaries[run_id] = pipe.read(timeout=30) or {}
            p.wait(timeout=30)
            pipe.close()


def _panel_queries() -> list[tuple[str, str, str]]:
    out = []
    for b in boards():
        out += [(b.slug, p.title, q.expr) for p in b.panels() for q in p.queries]
        out += [(b.slug, f"annotation {a.name}", a.expr) for a in b.annotations]
    return out


def _alerts_by_run(prom: LocalPrometheus) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = {}
    for al in prom.alerts():
        out.setdefault(al["labels"].get("run", ""), {})[al["labels"]["alertname"]] = al
    return out


def _ready(prom: LocalPrometheus, runs: InstrumentedRuns) -> bool:
    firing = _alerts_by_run(prom).get(runs.faulty_run, {})
    if not {rule(i).name for i in runs.expected_alerts} <= set(firing):
        return False
    values = {**PANEL_VARS, "run": runs.faulty_run}
    return all(prom.query(s.substitute(e, values)) for _, _, e in _panel_queries())


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    need("prometheus")
    base = tmp_path_factory.mktemp("dash-runs")
    with LocalPrometheus([base / "faulty", base / "healthy"], port=0) as prom:
        with drive_synthetic(base) as runs:
            # the doctor watches both runs as they grow (rlobs observe runs it): its exporters feed the overview's
            # doctor row and the explorer's doctor panels, and on the healthy run it must find nothing that pages
            watcher = DoctorWatcher([runs.faulty_dir, runs.healthy_dir], interval=2.0).start()
            try:
                deadline = time.monotonic() + WAIT_S
                while not _ready(prom, runs) and time.monotonic() < deadline:
                    time.sleep(1.0)
                yield prom, runs
            finally:
                watcher.close()
    # after a clean stop: the only telemetry drops were the invalid events the faulty run sent on purpose
    faulty, healthy = runs.summaries.get(runs.faulty_run), runs.summaries.get(runs.healthy_run)
    if faulty is not None:
        assert faulty["dropped_total"] == faulty["invalid_sent"] > 0, faulty
        assert healthy["dropped_total"] == 0, healthy


def test_every_process_of_both_runs_is_scraped(live):
    prom, runs = live
    targets = prom.targets()
    assert len(targets) >= 2 and all(t["health"] == "up" for t in targets), targets
    assert all(t["labels"]["instance"].startswith("127.0.0.1:") for t in targets)
    runs_seen = prom.api("label/run/values", **{"match[]": "rlobs_telemetry_events_total"})
    assert {runs.faulty_run, runs.healthy_run} <= set(runs_seen)
    comps = prom.api("label/component/values", **{"match[]": f'rlobs_telemetry_events_total{{run="{runs.faulty_run}"}}'})
    assert len(comps) >= 2


def test_every_panel_query_of_every_dashboard_returns_data(live):
    prom, runs = live
    values = {**PANEL_VARS, "run": runs.faulty_run}
    # Grafana runs an annotation query over the whole time range shown; an instant query with a window as
    # wide as the run so far stands for that (a 1 m window misses the incidents declared at the onset)
    annotation_values = {**values, "__rate_interval": "10m"}

    def vars_for(title: str) -> dict[str, str]:
        return annotation_values if title.startswith("annotation ") else values

    empty = [(board, title, s.substitute(e, vars_for(title))) for board, title, e in _panel_queries()
             if not prom.query(s.substitute(e, vars_for(title)))]
    assert not empty, "panels without data:\n" + "\n".join(map(str, empty))
    synthetic = json.loads((runs.faulty_dir / "synthetic_metrics.json").read_text()) \
        if (runs.faulty_dir / "synthetic_metrics.json").exists() else []
    if synthetic:
        print(f"fed synthetically (give them realistic events in {EMITTER.name}): {synthetic}")


def test_panels_filter_by_run(live):
    prom, runs = live
    expr = s.gauge("rlobs_staleness_max_versions", s.DASHBOARD)
    faulty = float(prom.query(s.substitute(expr, {**PANEL_VARS, "run": runs.faulty_run}))[0]["value"][1])
    healthy = float(prom.query(s.substitute(expr, {**PANEL_VARS, "run": runs.healthy_run}))[0]["value"][1])
    assert faulty >= 10 and healthy <= 2


def test_the_alert_matching_each_injected_fault_is_pending_or_firing(live):
    prom, runs = live
    active = _alerts_by_run(prom).get(runs.faulty_run, {})
    missing = sorted(i for i in runs.expected_alerts if rule(i).name not in active)
    assert not missing, f"not pending/firing: {missing}; active: {sorted(active)}"
    for alert_id in runs.expected_alerts:
        al = active[rule(alert_id).name]
        assert al["state"] in ("pending", "firing")
        assert al["annotations"]["runbook_url"] == runbook_url(alert_id)
        assert al["labels"]["severity"] == rule(alert_id).severity
        assert runs.faulty_run in al["annotations"]["summary"] + al["annotations"]["description"]


def test_active_alerts_table_links_each_alerts_runbook(live):
    prom, runs = live
    overview = next(b for b in boards() if b.slug == "overview")
    panel = next(p for p in overview.panels() if p.title.startswith("Active alerts"))
    rows = prom.query(s.substitute(panel.queries[0].expr, {**PANEL_VARS, "run": runs.faulty_run}))
    assert rows
    (field_name, template), = panel.links
    for row in rows:
        labels = row["metric"]
        link = template.replace("{runbook_base}", runbook_url("")[: -len(".md")]).replace("${__value.raw}",
                                                                                        labels[field_name])
        assert rule(labels["runbook"]).name == labels["alertname"]
        assert link == runbook_url(labels["runbook"])
        assert (REPO / "runbooks" / f"{labels['runbook']}.md").is_file()


def test_the_healthy_run_raises_no_alert(live):
    prom, runs = live
    assert _alerts_by_run(prom).get(runs.healthy_run, {}) == {}


def test_every_series_prometheus_stores_is_in_the_catalogue(live):
    prom, _ = live
    names = {r["metric"]["__name__"] for r in prom.query('count by (__name__) ({__name__=~"rlobs_.*"})')}
    # prometheus_client adds a `<base>_created` timestamp per counter/histogram child (unless
    # prometheus_client.disable_created_metrics() is called); nothing else may appear.
    created = {f"{spec.name.removesuffix('_total')}_created" for spec in METRICS if spec.type != "gauge"}
    unknown = names - all_exposed_names() - created
    assert names and not unknown, sorted(unknown)


def test_promtool_check_metrics_is_clean_on_a_real_scrape(live):
    prom, runs = live
    promtool = need("promtool")
    targets = [(t["scrapeUrl"], t["labels"].get("component")) for t in prom.targets()
               if t["labels"].get("job") == "rlobs"]
    assert targets and {c for _, c in targets} >= {"trainer", "doctor"}
    for url, component in targets:
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = resp.read()
        # every recording process exposes its recorder's counters; the doctor's exporter its verdict
        assert (b"rlobs_doctor_evaluations_total" if component == "doctor" else b"rlobs_telemetry_events_total") in body
        out = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30)
        assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), \
            (url, out.stdout.decode(), out.stderr.decode())


def test_every_runbook_promql_runs_and_names_only_catalogue_metrics(live):
    from .conftest import RUNBOOKS
    from .runbook_text import promql_exprs, runbook_pages

    prom, _ = live
    known = all_exposed_names() | s.BUILTIN_SERIES
    ran = 0
    for rid, text in runbook_pages(RUNBOOKS).items():
        for expr in promql_exprs(text):
            assert s.metric_names(expr) <= known, f"{rid}: {expr}"
            prom.query(expr)  # raises PrometheusError on a parse or evaluation error
            ran += 1
    assert ran >= 30
