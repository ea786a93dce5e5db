"""The committed dashboards/ is exactly what the code generates, and the boards follow the rules."""

from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from rlobs.catalogue import CATALOGUE, METRICS, all_exposed_names
from rlobs.cli import app
from rlobs.dashboards import selectors as s
from rlobs.dashboards.build import BOARD_FACTORIES, boards, build, generated_files
from rlobs.dashboards.model import Board, Panel, Query, Row

from .conftest import DASHBOARDS

REQUIRED_BOARDS = {"overview.json", "weight-sync.json", "staleness-throughput.json", "policy-health.json",
                   "graders.json", "explorer.json"}


def test_committed_files_match_the_generator_byte_for_byte():
    files = generated_files()
    for rel, content in files.items():
        path = DASHBOARDS / rel
        assert path.is_file(), f"{path} missing: run `rlobs dashboards build`"
        assert path.read_bytes() == content.encode(), f"{path} is stale: run `rlobs dashboards build`"
    assert sorted(p.name for p in DASHBOARDS.glob("*.json")) == sorted(r for r in files if r.endswith(".json"))
    assert REQUIRED_BOARDS <= set(files)


def test_generation_is_deterministic():
    assert generated_files() == generated_files()


def test_cli_check_detects_a_stale_file_and_build_repairs_it(tmp_path):
    tmp_path = tmp_path / ("a-folder-deep-enough-that-its-paths-pass-80-columns-" * 2)  # paths print unwrapped
    runner = CliRunner()
    assert runner.invoke(app, ["dashboards", "build", "--out", str(tmp_path)]).exit_code == 0
    ok = runner.invoke(app, ["dashboards", "build", "--out", str(tmp_path), "--check"])
    assert ok.exit_code == 0, ok.output
    (tmp_path / "graders.json").write_text("{}")
    (tmp_path / "old-board.json").write_text("{}")
    bad = runner.invoke(app, ["dashboards", "build", "--out", str(tmp_path), "--check"])
    assert bad.exit_code == 1
    # whole paths, longer than a console line here: a path wrapped mid-name cannot be copied from the output
    assert str(tmp_path / "graders.json") in bad.output and str(tmp_path / "old-board.json") in bad.output
    assert build(tmp_path).written == ("graders.json",)
    assert build(tmp_path, check=True).differing == ()


def _targets(board: dict) -> list[tuple[str, dict]]:
    out = [(p["title"], t) for p in board["panels"] if p["type"] != "row" for t in p["targets"]]
    out += [(a["name"], {"expr": a["expr"], "refId": "annotation"}) for a in board.get("annotations", {}).get("list", [])]
    return out


def test_every_panel_has_a_unit_a_description_datasource_and_ref_ids(board_json):
    for name, board in board_json.items():
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)) and 0 not in ids, name
        for p in board["panels"]:
            if p["type"] == "row":
                continue
            where = f"{name}: {p['title']}"
            assert p["fieldConfig"]["defaults"].get("unit"), f"{where} has no unit"
            assert p["description"], where
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
            refs = [t["refId"] for t in p["targets"]]
            assert refs and all(refs) and len(refs) == len(set(refs)), f"{where}: refIds {refs}"


def test_template_variables_datasource_run_component(board_json):
    for name, board in board_json.items():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert set(variables) == {"datasource", "run", "component"}, name
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        for label in ("run", "component"):
            v = variables[label]
            assert v["type"] == "query" and v["multi"] and v["includeAll"] and v["allValue"] == ".*"
            assert v["query"].startswith("label_values(rlobs_") and v["query"].endswith(f", {label})")
        for title, t in _targets(board):
            if "rlobs_" in t["expr"]:
                assert '"$run"' in t["expr"], f"{name}: {title} ignores $run: {t['expr']}"


def test_no_query_names_a_metric_missing_from_the_catalogue(board_json):
    known = all_exposed_names() | s.BUILTIN_SERIES
    seen: set[str] = set()
    for name, board in board_json.items():
        for title, t in _targets(board):
            names = s.metric_names(t["expr"])
            assert names, f"{name}: {title}: no series in {t['expr']}"
            assert names <= known, f"{name}: {title} names {sorted(names - known)} (not in rlobs.catalogue)"
            seen |= names
        for v in board["templating"]["list"]:
            if v["type"] == "query":
                assert s.metric_names(v["query"].removeprefix("label_values(").rsplit(",", 1)[0]) <= known
    # the explorer board is generated from the catalogue: every metric (also ones appended later) is shown
    for spec in METRICS:
        assert any(n.startswith(spec.name) for n in seen), f"{spec.name} is on no dashboard"


def test_panel_units_follow_the_catalogue_for_plain_metrics():
    from rlobs.dashboards.model import unit_of

    for board in boards():
        for p in board.panels():
            for query in p.queries:
                names = s.metric_names(query.expr)
                plain = query.expr.startswith(("max(", "min(", "sum(", "max by", "min by", "sum by")) \
                    and "rate(" not in query.expr and "increase(" not in query.expr
                if plain and len(names) == 1 and next(iter(names)) in CATALOGUE and p.kind != "table" \
                        and not next(iter(names)).endswith("_total"):
                    expected = unit_of(next(iter(names)))
                    counts = {"none", "short"}  # catalogue unit "1": a plain number or a count
                    assert p.unit == expected or {p.unit, expected} <= counts, f"{board.uid}: {p.title}"


def test_model_rejects_panels_without_unit_or_query_and_duplicate_titles():
    import pytest

    with pytest.raises(ValueError, match="unit"):
        Panel("x", "timeseries", "", (Query("up"),), "d")
    with pytest.raises(ValueError, match="query"):
        Panel("x", "timeseries", "s", (), "d")
    p = Panel("x", "timeseries", "s", (Query("up"),), "d")
    with pytest.raises(ValueError, match="repeat"):
        Board("rlobs-x", "x", "d", (Row("r", (p, p)),))
    assert len(BOARD_FACTORIES) == 6


def test_import_rlobs_does_not_import_the_grafana_sdk():
    code = ("import sys, rlobs, rlobs.dashboards, rlobs.dashboards.build, rlobs.dashboards.observe, rlobs.cli; "
            "print(any(m.startswith('grafana_foundation_sdk') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_overview_panels_json_is_sorted_and_indented():
    text = (DASHBOARDS / "overview.json").read_text()
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n"


def test_active_alerts_table_links_the_runbook_column_with_the_builds_base_url():
    for base, expected in ((None, "https://github.com/rlobs/rlobs/blob/main/runbooks/${__value.raw}.md"),
                           ("https://wiki.example/rb", "https://wiki.example/rb/${__value.raw}.md")):
        board = json.loads(generated_files(base)["overview.json"])
        panel = next(p for p in board["panels"] if p.get("title", "").startswith("Active alerts"))
        (override,) = panel["fieldConfig"]["overrides"]
        assert override["matcher"] == {"id": "byName", "options": "runbook"}
        assert override["properties"][0]["value"][0]["url"] == expected
        assert "runbook" in panel["targets"][0]["expr"]
