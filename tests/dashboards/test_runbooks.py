"""Runbooks: one per alert and per doctor rule, on one template, pointing at panels that exist and
commands that run (the SQL is executed on a real run record here; the PromQL on a real Prometheus in
the integration test)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

import rlobs
from rlobs.dashboards.alerts import RULES
from rlobs.dashboards.build import boards
from rlobs.failures import FAILURES

from .conftest import RUNBOOKS
from .runbook_text import (
    PANEL_REF,
    SECTIONS,
    promql_exprs,
    runbook_pages,
    sections,
    sql_queries,
)

# Doctor rules without an alert of their own, from the failure table (alert ids double as doctor rule ids).
DOCTOR_ONLY = {fid for fid, f in FAILURES.items() if f.rule and not f.alert}
PAGES = runbook_pages(RUNBOOKS)


def test_one_runbook_per_alert_and_doctor_rule_and_nothing_else():
    alert_ids = {r.id for r in RULES}
    assert set(PAGES) == alert_ids | DOCTOR_ONLY
    index = (RUNBOOKS / "README.md").read_text()
    for rid in PAGES:
        assert f"]({rid}.md)" in index, f"runbooks/README.md does not list {rid}"


@pytest.mark.parametrize("rid", sorted(PAGES))
def test_runbook_follows_the_template(rid):
    text = PAGES[rid]
    assert text.startswith("# "), rid
    found = sections(text)
    assert tuple(found) == SECTIONS, f"{rid}: sections {tuple(found)}"
    for name, body in found.items():
        assert len(body) > 80, f"{rid}: section {name!r} is a stub"
    causes = [line for line in found["Likely causes, in order"].splitlines() if re.match(r"\d+\. ", line)]
    assert len(causes) >= 3, f"{rid}: list at least three likely causes, most likely first"
    from rlobs.doctor import registry

    # the doctor's rule of the same id, or (for a live-only alert) the doctor rule that sees it after the fact
    rule_ids = set(registry())
    named = set(re.findall(r"rlobs doctor RUN --rule ([a-z0-9-]+)", found["Commands to confirm"]))
    assert named and named <= rule_ids, f"{rid}: doctor commands name {named - rule_ids or 'no rule'}"
    assert rid not in rule_ids or rid in named, rid
    assert not any(w in text for w in ("TODO", "TBD", "FIXME", "lorem")), rid
    assert len(text) > 1500, f"{rid}: too short to act on"
    for r in RULES:
        if r.id == rid:
            assert f"`{r.name}`" in text.split("\n\n")[1], f"{rid}: name the alert {r.name} under the title"
    # the alert's severity in the header is the failure table's
    assert not FAILURES[rid].alert or f"({FAILURES[rid].severity}" in text.split("\n\n")[1], f"{rid}: severity {FAILURES[rid].severity}"


def test_panel_references_exist_in_the_generated_boards():
    titles = {(b.title.removeprefix("rlobs / "), p.title) for b in boards() for p in b.panels()}
    for rid, text in PAGES.items():
        refs = PANEL_REF.findall(sections(text)["Panels to open"])
        assert len(refs) >= 2, f"{rid}: open at least two panels"
        for board, panel in refs:
            assert (board, panel) in titles, f"{rid}: no panel {board!r} › {panel!r}"


def test_field_lessons_are_in_the_runbooks_where_they_apply():
    assert "denominator before" in PAGES["grad-norm-spike"] and "denominator before" in PAGES["grad-norm-nonfinite"]
    for rid in ("weight-sync-boundary-failed", "weight-sync-slow", "weight-sync-fingerprint-mismatch"):
        assert "boundaries in order" in PAGES[rid], rid
    assert "defences" in PAGES["staleness-over-bound"]
    for rid in ("grader-timeouts", "grader-hung", "grader-slow"):
        assert "ecouple" in PAGES[rid], rid


@pytest.fixture(scope="module")
def faulty_record(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runbook-run") / "run"
    from .test_prometheus_integration import EMITTER

    out = subprocess.run([sys.executable, str(EMITTER), str(run_dir), "--run-id", "rb", "--faults",
                          "--seconds", "3", "--period", "0.3"], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    return rlobs.open_run(run_dir)


def test_every_runbook_sql_runs_on_a_real_record(faulty_record):
    ran = 0
    for rid, text in PAGES.items():
        for sql in sql_queries(text):
            try:
                faulty_record.sql(sql).fetchall()
            except Exception as exc:  # noqa: BLE001 - report which runbook
                pytest.fail(f"{rid}: {type(exc).__name__}: {exc}\n{sql}")
            ran += 1
    assert ran >= 20


def test_promql_blocks_are_present():
    assert sum(len(promql_exprs(t)) for t in PAGES.values()) >= 30


def test_every_doctor_rule_has_a_runbook_once_the_doctor_exists():
    try:
        model = importlib.import_module("rlobs.doctor.model")
        ids = set(model.registry())
    except ImportError as exc:
        pytest.skip(f"rlobs.doctor not importable yet (issue 5): {exc}")
    missing = sorted(i for i in ids if not (RUNBOOKS / f"{i}.md").is_file())
    assert not missing, f"doctor rules without a runbook: {missing}"
