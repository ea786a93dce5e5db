"""Dashboards and alerts against a real Prometheus scraping a real ``trainer_ref`` run with a fault.

Debian's Prometheus (``LocalPrometheus``, the engine of ``rlobs observe``) scrapes every process of the
reference trainer (driver, trainer, vLLM generator, grader pool: real Ray actors) through the run's
``prometheus_sd`` files while it trains ``separate_async`` with ``fingerprint_mismatch`` injected from
step 2 (the engine loads a perturbed ``model.norm.weight``). The driver holds the run at its last step
until the checks are done, so every process is still up. Then: every panel query of every dashboard
returns data for the run, the alert for the injected fault is firing with its runbook, no query or
stored series names a metric outside the catalogue, and ``promtool check metrics`` is clean on each
process's real scrape. (``test_prometheus_integration.py`` covers every alert at once, and the
no-alert healthy run, with a synthetic emitter.)
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlobs.catalogue import all_exposed_names
from rlobs.dashboards import selectors as s
from rlobs.dashboards.alerts import RULES, rule, runbook_url
from rlobs.dashboards.build import boards
from rlobs.dashboards.observe import LocalPrometheus
from rlobs.doctor.exporter import DoctorWatcher
from tests.status_channel import StatusPipe

from .conftest import REPO, need

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

DRIVER = Path(__file__).with_name("drive_trainer_ref.py")
FAULT, EXPECTED_ALERT = "fingerprint_mismatch", "weight-sync-fingerprint-mismatch"
PANEL_VARS = {"component": ".*", "__rate_interval": "1m"}
WAIT_S = 90.0


def _queries() -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """(panel queries, annotation queries) of every dashboard: (board, title, expr)."""
    panels, annotations = [], []
    for b in boards():
        panels += [(b.slug, p.title, q.expr) for p in b.panels() for q in p.queries]
        annotations += [(b.slug, a.name, a.expr) for a in b.annotations]
    return panels, annotations


def _active(prom: LocalPrometheus, run: str) -> dict[str, dict]:
    return {a["labels"]["alertname"]: a for a in prom.alerts() if a["labels"].get("run") == run}


# fed only by a run whose staleness bound is not on dispatch: this run bounds dispatch, where the staleness drops the
# panels show come reliably (under the completion basis an 8-step run may drop none: the dropped-samples query was
# empty in one fresh-clone CI run of 6 Dec 2026). The gauge's path through a real Prometheus to its panels and alert:
# test_prometheus_integration (its faulty run bounds on the completion); from trainer_ref: test_modes
ONLY_OTHER_BASES = {"rlobs_staleness_bounded_max_versions"}


def _empty(prom: LocalPrometheus, run: str) -> list[tuple[str, str, str]]:
    panels, _ = _queries()
    return [(b, t, e) for b, t, e in panels if not s.metric_names(e) <= ONLY_OTHER_BASES
            and not prom.query(s.substitute(e, {**PANEL_VARS, "run": run}))]


def _wait_scraped(prom: LocalPrometheus, run: str, timeout: float = 120.0) -> None:
    """Until every component of the run has been scraped and the grader calls of its first step are stored: the
    steps after it then show as increases. (On a loaded machine the whole 8-step run could end before the first
    scrape of a grader, and every rate over it was 0: one fresh-clone CI run of 5 Dec 2026.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        comps = prom.api("label/component/values", **{"match[]": f'rlobs_telemetry_events_total{{run="{run}"}}'})
        if {"driver", "trainer", "generator", "grader"} <= set(comps) and \
                prom.query(f'rlobs_grader_calls_total{{run="{run}"}}'):
            return
        time.sleep(1.0)
    raise AssertionError(f"Prometheus did not scrape every process of run {run} within {timeout:.0f} s: "
                         f"{prom.targets()}")


@contextlib.contextmanager
def doctor_watching(run_dirs: list[Path]) -> Iterator[DoctorWatcher]:
    """The doctor watching the run as it grows, as `rlobs observe` runs it: its exporter feeds the
    overview's doctor row and the explorer's doctor panels."""
    watcher = DoctorWatcher(run_dirs, interval=2.0).start()
    try:
        yield watcher
    finally:
        watcher.close()


@pytest.fixture(scope="module")
def ref_run(tmp_path_factory):
    need("prometheus")
    run_dir = tmp_path_factory.mktemp("dash-ref") / "faulty"
    run_dir.mkdir()
    with LocalPrometheus([run_dir], port=0) as prom, doctor_watching([run_dir]):
        status = StatusPipe()
        log = run_dir.parent / "driver.log"  # its stdout/stderr: for the reader of a failure, not a protocol
        with open(log, "wb") as log_f:
            proc = subprocess.Popen([sys.executable, str(DRIVER), str(run_dir), "--fault", FAULT, "--steps", "8",
                                     "--onset", "2"], stdin=subprocess.PIPE, stdout=log_f, stderr=subprocess.STDOUT,
                                    cwd=REPO, **status.popen_kwargs())
        status.started()
        try:
            first = status.read(timeout=900)  # a fresh machine builds the tiny model first
            assert first and first.get("first_step"), f"trainer_ref driver ended before its first step (exit " \
                f"{proc.wait()}):\n" + log.read_text(errors="replace")[-3000:]
            _wait_scraped(prom, first["run_id"])
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
            ready = status.read(timeout=900)
            assert ready, f"trainer_ref driver ended before its last step (exit {proc.wait()}):\n" + \
                log.read_text(errors="replace")[-3000:]
            run = ready["run_id"]
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                if rule(EXPECTED_ALERT).name in _active(prom, run) and not _empty(prom, run):
                    break
                time.sleep(2.0)
            yield prom, run, run_dir
        finally:
            proc.stdin.close()  # the driver finishes its last step and shuts the run down
            summary = status.read(timeout=300)
            proc.wait(timeout=300)
            status.close()
    assert summary and summary["steps"] == 8 and summary["telemetry_dropped"] == 0, \
        (summary, log.read_text(errors="replace")[-3000:])


def test_every_process_of_the_trainer_is_scraped(ref_run):
    prom, run, _ = ref_run
    targets = prom.targets()  # this Prometheus scrapes this run only
    assert len(targets) >= 4 and all(t["health"] == "up" for t in targets), targets
    assert all(t["labels"]["instance"].startswith("127.0.0.1:") for t in targets)
    comps = prom.api("label/component/values", **{"match[]": f'rlobs_telemetry_events_total{{run="{run}"}}'})
    assert {"driver", "trainer", "generator", "grader"} <= set(comps), comps


def test_every_panel_query_of_every_dashboard_returns_data(ref_run):
    prom, run, _ = ref_run
    empty = _empty(prom, run)
    assert not empty, "panels without data:\n" + "\n".join(map(str, empty))


def test_a_share_with_no_matching_calls_is_zero_not_missing(ref_run):
    """No grader call timed out: the timeout-share panel shows 0 % per grader kind, not "no data".

    The run holds at its last step while this module's tests run, so its grader calls stop; on a loaded machine a
    1-minute window can open after the last of them (0 of 0 calls: NaN, rightly "no data", one fresh-clone CI run
    of 5 Dec 2026). The window here spans the run's calls, and the test checks it does; the fixture lets the run go
    on after its first step only once every process has been scraped, so the calls are seen rising (a second CI
    run that day saw the whole run end before the first scrape of its grader: a rate of 0 over 15 minutes)."""
    prom, run, _ = ref_run
    wide = {**PANEL_VARS, "__rate_interval": "15m", "run": run}
    calls = prom.query(s.substitute(s.agg("sum", s.rate("rlobs_grader_calls_total", s.DASHBOARD), ("grader_kind",)),
                                    wide))
    assert calls and all(float(r["value"][1]) > 0 for r in calls), calls
    expr = s.share_where("rlobs_grader_calls_total", s.DASHBOARD, ("grader_kind",), outcome="timeout")
    got = prom.query(s.substitute(expr, wide))
    assert got and {r["metric"]["grader_kind"] for r in got} == {"rule"}
    assert all(float(r["value"][1]) == 0.0 for r in got), got


def test_annotation_queries_run_and_the_declared_fault_is_marked(ref_run):
    """Annotations mark events (spikes, non-finite norms, incidents): each query must evaluate, and the
    incident the trainer declared for its injected fault must be there."""
    prom, run, _ = ref_run
    _, annotations = _queries()
    assert annotations
    marked = {name for _, name, e in annotations if prom.query(s.substitute(e, {**PANEL_VARS, "run": run}))}
    assert any("incident" in name.lower() for name in marked), marked


def test_the_alert_for_the_injected_fault_is_firing_with_its_runbook(ref_run):
    prom, run, _ = ref_run
    active = _active(prom, run)
    al = active.get(rule(EXPECTED_ALERT).name)
    assert al is not None, f"{EXPECTED_ALERT} not active; active: {sorted(active)}"
    assert al["state"] in ("pending", "firing")
    assert al["annotations"]["runbook_url"] == runbook_url(EXPECTED_ALERT)
    assert (REPO / "runbooks" / f"{EXPECTED_ALERT}.md").is_file()
    assert al["labels"]["severity"] == rule(EXPECTED_ALERT).severity == "critical"
    assert run in al["annotations"]["summary"] + al["annotations"]["description"]


def test_no_query_names_a_metric_outside_the_catalogue(ref_run):
    prom, _, _ = ref_run
    known = all_exposed_names() | s.BUILTIN_SERIES
    panels, annotations = _queries()
    exprs = [e for _, _, e in panels + annotations] + [r.expr for r in RULES]
    unknown = sorted({m for e in exprs for m in s.metric_names(e)} - known)
    assert not unknown, unknown
    stored = {r["metric"]["__name__"] for r in prom.query('count by (__name__) ({__name__=~"rlobs_.*"})')}
    assert stored and stored <= all_exposed_names(), sorted(stored - all_exposed_names())


def test_promtool_check_metrics_is_clean_on_each_process(ref_run):
    prom, _, _ = ref_run
    promtool = need("promtool")
    urls = [t["scrapeUrl"] for t in prom.targets()]
    assert len(urls) >= 4, urls
    for url in urls:
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = resp.read()
        out = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30)
        assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), \
            (url, out.stdout.decode(), out.stderr.decode())
