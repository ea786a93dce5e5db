"""The app's data access (queries, cache, refresh), path confinement, the replay command, and lazy imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlobs.app import paths, queries
from rlobs.app.data import RunData


def test_importing_rlobs_and_the_app_data_layer_never_imports_streamlit():
    code = ("import sys, rlobs, rlobs.cli, rlobs.app, rlobs.app.data, rlobs.app.queries, rlobs.app.paths; "
            "bad = [m for m in ('streamlit', 'altair') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_queries_on_a_recorded_scenario(runs_root):
    run = RunData(runs_root / "cache_not_reset")
    assert run.ok and not run.problems and run.steps() == (0, 15)
    versions = run.q("sync_versions")
    assert versions["version"].tolist() == list(range(1, 17))
    failed = versions[versions["failed"].notna()]
    assert failed["version"].tolist() == list(range(9, 17)) and set(failed["failed"]) == {"cache_reset:skipped"}
    gantt = run.q("sync_gantt", (9,))
    assert gantt["boundary"].tolist() == ["dump", "staging", "transfer", "load", "cache_reset"]
    assert gantt["start_ms"].iloc[0] == 0.0 and gantt.loc[gantt["boundary"] == "cache_reset", "outcome"].item() == "skipped"
    markers = run.q("sync_markers")
    assert markers.loc[~markers["ok"].astype(bool), "step"].tolist() == list(range(8, 16))
    hist = run.q("staleness_histogram", 0, 15)
    assert int(hist["samples"].sum()) == 256
    by_step = run.q("grader_by_step")  # grader events carry no step: they take their rollout's
    assert by_step["step"].tolist() == list(range(16)) and set(by_step["calls"]) == {16}
    summary = run.q("grader_summary")
    assert summary[["grader_kind", "calls", "timeouts", "errors"]].values.tolist() == [["rule", 256, 0, 0]]


def test_sample_page_filters_and_detail(runs_root):
    run = RunData(runs_root / "hung_grader")
    page, total = run.samples_page(queries.SampleFilter(), limit=10)
    assert total == 256 and len(page) == 10 and page["sample_id"].iloc[0] == "s0-0-0"
    page, total = run.samples_page(queries.SampleFilter(outcomes=["timeout"], step_lo=10, step_hi=11))
    assert total == 8 and set(page["step"]) == {10, 11} and page["reward"].isna().all()
    page, total = run.samples_page(queries.SampleFilter(group="g3-*"))
    assert total == 16 and set(page["group_id"]) == {"g3-0", "g3-1", "g3-2", "g3-3"}
    detail = run.q("sample_detail", "s3-1-2")
    tokens = detail["tokens"]
    assert len(tokens) == detail["rollout"]["completion_tokens"] and tokens["trainer_logprob"].notna().all()
    assert detail["ledger"]["state"].tolist() == ["generated", "graded", "consumed"]
    assert run.q("sample_detail", "nope") is None


def test_config_diff_lists_only_what_differs(runs_root):
    a, b = RunData(runs_root / "healthy"), RunData(runs_root / "cache_not_reset")
    diff = queries.config_diff(a.q("config_of"), b.q("config_of"))
    assert diff.values.tolist() == [["config.fault", "null", "cache_not_reset", True]]


def test_cache_is_kept_until_the_record_changes(tmp_path):
    import rlobs

    rec = rlobs.init(tmp_path / "live", component="trainer", prometheus=False, set_global=False, flush_interval=3600)
    try:
        rec.emit("train_step", step=0, loss=1.0, grad_norm=1.0)
        rec.flush()
        run = RunData(tmp_path / "live")
        assert len(run.q("train_series")) == 1 and run.still_running
        assert run.refresh() is False and run.q("train_series") is run.q("train_series")  # cached
        rec.emit("train_step", step=1, loss=1.0, grad_norm=1.0)
        rec.flush()
        assert run.refresh() is True and len(run.q("train_series")) == 2
    finally:
        rec.close()


def test_a_record_that_cannot_be_opened_is_an_error_value(runs_root):
    run = RunData(runs_root / "broken")
    assert not run.ok and run.error.startswith("RunRecordError")


def test_paths_are_confined_under_the_runs_root(runs_root, tmp_path):
    assert paths.confine(runs_root, "healthy") == (runs_root / "healthy").resolve()
    assert paths.confine(runs_root, runs_root / "healthy") == (runs_root / "healthy").resolve()
    outside = tmp_path / "outside"
    outside.mkdir()
    (runs_root / "sneaky").symlink_to(outside) if not (runs_root / "sneaky").exists() else None
    for bad in ("../", "healthy/../..", "/etc", str(outside), "sneaky", "missing"):
        with pytest.raises(paths.PathOutsideRoot):
            paths.confine(runs_root, bad)
    assert {"healthy", "cache_not_reset", "hung_grader", "damaged", "broken"} <= set(paths.list_runs(runs_root))
    root, runs = paths.from_env({paths.ENV_ROOT: str(runs_root), paths.ENV_RUNS: os.pathsep.join(["healthy", "damaged"])})
    assert root == runs_root.resolve() and [r.name for r in runs] == ["healthy", "damaged"]
    with pytest.raises(paths.PathOutsideRoot):
        paths.from_env({paths.ENV_ROOT: str(runs_root / "healthy"), paths.ENV_RUNS: "../damaged"})


def test_replay_refuses_runs_outside_the_root_and_non_runs(runs_root, tmp_path):
    from typer.testing import CliRunner

    from rlobs import exitcodes
    from rlobs.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["replay", str(runs_root / "healthy"), "--runs-root", str(tmp_path / "elsewhere")])
    assert res.exit_code == exitcodes.INPUT and "outside the runs root" in res.output
    res = runner.invoke(app, ["replay", str(runs_root / "broken")])
    assert res.exit_code == exitcodes.INPUT and "manifest" in res.output.lower()


def test_streamlit_is_an_optional_dependency_of_the_cli():
    src = Path(__file__).resolve().parents[2] / "rlobs" / "cli.py"
    text = src.read_text()
    assert "import streamlit" not in text and '"-m", "streamlit", "run"' in text
    assert '"--server.enableXsrfProtection", "true"' in text and 'address: str = typer.Option("127.0.0.1"' in text


def test_rollouts_without_a_step_are_placed_at_their_policy_version(tmp_path):
    import rlobs

    gen = rlobs.init(tmp_path / "r", component="generator", prometheus=False, set_global=False)
    for version in (3, 4):
        gen.set_policy_version(version)
        for i in range(2):
            gen.emit("rollout", sample_id=f"s{version}-{i}", group_id=f"g{version}", dispatch_version=version - 1,
                     finish_reason="stop", completion_tokens=5)
            gen.emit("grader_call", sample_id=f"s{version}-{i}", grader_kind="exact", latency_s=0.01, outcome="ok",
                     reward=1.0)
    gen.close()
    run = RunData(tmp_path / "r")
    assert run.steps() == (3, 4)
    page, total = run.samples_page(queries.SampleFilter(step_lo=4, step_hi=4))
    assert total == 2 and page["sample_id"].tolist() == ["s4-0", "s4-1"] and page["staleness"].tolist() == [1, 1]
    assert run.q("grader_by_step")[["step", "calls"]].values.tolist() == [[3, 2], [4, 2]]
