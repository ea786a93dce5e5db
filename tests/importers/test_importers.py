"""Importers on realistic logs of each format (fixtures.py), malformed ones included: every value ends up
in the record (mapped or as a scalar) or in the report, errors are clear, and the doctor runs on the result."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import rlobs
from rlobs import exitcodes
from rlobs.cli import app
from rlobs.importers import TABLES, ImportFailed, import_run
from rlobs.importers.mapping import MetricTable
from tests.importers import fixtures as fx


def _same(a: Any, b: float) -> bool:
    if isinstance(b, float) and math.isnan(b):
        return a is not None and math.isnan(a)
    return a is not None and a == pytest.approx(b, rel=1e-9, abs=1e-12)


def assert_nothing_lost(run: Path, table: MetricTable, expected: dict[int, dict[str, float]]) -> None:
    """Each logged (step, name, value) is a scalar event or the field its (lossless) target names."""
    with rlobs.open_run(run) as rec:
        scalars = {(s, n): v for s, n, v in rec.sql("SELECT step, name, value FROM scalar").fetchall()}
        for step, values in expected.items():
            for name, value in values.items():
                if (step, name) in scalars:
                    assert _same(scalars[(step, name)], value), (step, name)
                    continue
                target = table.lookup(name)
                assert target is not None and target.lossless, f"{name} at step {step} is neither mapped nor a scalar"
                where = " AND ".join([f"step = {step}"] + [f"{k} = '{v}'" for k, v in target.fixed.items()])
                got = rec.sql(f"SELECT {target.field} FROM {target.kind} WHERE {where}").fetchall()
                assert len(got) == 1 and _same(got[0][0], value), (step, name, got, value)
        assert rec.sql("SELECT count(*) FROM telemetry WHERE dropped > 0").fetchall()[0][0] == 0


def _doctor(run: Path) -> dict[str, Any]:
    res = CliRunner().invoke(app, ["doctor", str(run), "--json"])
    report = json.loads(res.stdout)
    assert res.exit_code == report["exit_code"]
    assert report["rule_errors"] == {}
    return report


# ---- verl ----
def test_verl_file_logger_maps_names_keeps_the_rest_and_the_doctor_finds_the_spike(tmp_path):
    src = fx.write_verl_file_logger(tmp_path / "metrics.jsonl", steps=12)
    report = import_run("verl", src, tmp_path / "run")
    assert (report.framework, report.source_format, report.rows, report.steps) == ("verl", "jsonl", 12, (1, 12))
    assert report.mapped["actor/grad_norm"] == "train_step.grad_norm"
    assert report.mapped["timing_s/update_weights"] == "weight_sync.duration_s [boundary=end_to_end]"
    assert report.mapped["critic/advantages/min"] == "advantage.max_abs_advantage (absmax)"
    assert set(report.unmapped) >= {"perf/throughput", "val-core/openai/gsm8k/reward/mean@1", "elapsed_seconds"}
    assert report.mapped["actor/pg_clipfrac"] == "scalar.value [name=rlobs/policy_clip_fraction] (alias)"
    assert report.issues == [] and report.nonnumeric == {}
    expected = {s: {**fx.verl_metrics(s), "elapsed_seconds": 21.0 * s} for s in range(1, 13)}
    # absmax targets are lossy: their originals are kept as scalars too, so every value is still there
    assert_nothing_lost(tmp_path / "run", TABLES["verl"], expected)
    with rlobs.open_run(tmp_path / "run") as rec:
        assert rec.sql("SELECT step, max_abs_advantage FROM advantage WHERE step = 3").fetchall() == [(3, 2.3)]
        assert rec.sql("SELECT version, boundary, duration_s, outcome FROM weight_sync WHERE step = 2").fetchall() == [
            (2, "end_to_end", 0.8, "ok")]
        assert rec.sql("SELECT phase, seconds FROM phase WHERE step = 1 ORDER BY phase").fetchall() == [
            ("generation", 11.0), ("grading", 1.5), ("training", 6.0)]
        assert rec.sql("SELECT mean_abs_dprob, mean_abs_dlogp FROM parity WHERE step = 1").fetchall() == [(0.003, None)]
        assert rec.sql("SELECT tokens, window_s FROM throughput WHERE step = 1").fetchall() == [(37000, 21.0)]
    saved = json.loads((tmp_path / "run" / "import_report.json").read_text())
    assert saved["mapped"] == report.mapped and saved["framework"] == "verl"
    doc = _doctor(tmp_path / "run")
    spikes = [f for f in doc["findings"] if f["rule"] == "grad-norm-spike"]
    # severity from impact: an unclipped spike the run absorbed (loss and reward keep their level) is a warning
    assert [(f["first_step"], f["severity"]) for f in spikes] == [(fx.SPIKE_STEP, "warning")]
    assert "not clipped; the run kept its trend" in spikes[0]["title"]
    assert doc["insufficient_data"]["advantage-zero-std-groups"] == "advantage events carry no zero_std_ratio"
    assert "only probability differences (mean_abs_dprob" in doc["insufficient_data"]["parity-drift"]
    assert doc["exit_code"] == 1


def test_verl_console_lines_parse_with_three_decimals(tmp_path):
    src = fx.write_verl_console(tmp_path / "console.log", steps=12)
    report = import_run("verl", src, tmp_path / "run")
    assert (report.source_format, report.rows, report.steps) == ("verl-console", 12, (1, 12))
    assert any("2 console line(s) without metrics" in n for n in report.notes)
    expected = {s: {k: round(float(v), 3) for k, v in fx.verl_metrics(s).items()} for s in range(1, 13)}
    assert_nothing_lost(tmp_path / "run", TABLES["verl"], expected)


def test_nan_truncated_and_malformed_lines_are_reported_and_nothing_else_is_lost(tmp_path):
    src = fx.write_verl_file_logger(tmp_path / "metrics.jsonl", steps=6, spike_at=None, nan_at=4)
    text = src.read_text().splitlines()
    text.insert(2, "{this is not json")
    src.write_text("\n".join(text) + '\n{"step": 7, "data": {"actor/grad_norm": 0.')  # killed mid-write
    report = import_run("verl", src, tmp_path / "run")
    assert report.rows == 6
    assert [(i.where, i.problem) for i in report.issues] == [("metrics.jsonl:3", "malformed"),
                                                             ("metrics.jsonl:8", "truncated")]
    assert report.nonfinite == {"actor/grad_norm": 1}
    expected = {s: {**fx.verl_metrics(s, spike_at=None, nan_at=4), "elapsed_seconds": 21.0 * s} for s in range(1, 7)}
    assert_nothing_lost(tmp_path / "run", TABLES["verl"], expected)
    doc = _doctor(tmp_path / "run")
    nonfinite = [f for f in doc["findings"] if f["rule"] == "grad-norm-nonfinite"]
    assert [(f["first_step"], f["last_step"], f["severity"]) for f in nonfinite] == [(4, 4, "critical")]
    res = CliRunner().invoke(app, ["import", "verl", str(src), "--out", str(tmp_path / "run2")])
    assert res.exit_code == 0
    assert "malformed: metrics.jsonl:3" in res.stdout and "truncated: metrics.jsonl:8" in res.stdout


# ---- TRL ----
def test_trl_trainer_state_json_and_checkpoint_folder(tmp_path):
    ckpt = tmp_path / "out" / "checkpoint-6"
    ckpt.mkdir(parents=True)
    fx.write_trl_state(ckpt / "trainer_state.json", steps=6)
    (tmp_path / "out" / "checkpoint-2").mkdir()
    fx.write_trl_state(tmp_path / "out" / "checkpoint-2" / "trainer_state.json", steps=2)
    report = import_run("trl", tmp_path / "out", tmp_path / "run")  # picks the newest checkpoint
    assert report.source.endswith("checkpoint-6/trainer_state.json")
    assert (report.framework, report.source_format, report.steps) == ("trl", "trl-state", (1, 6))
    assert report.mapped["frac_reward_zero_std"] == "advantage.zero_std_ratio"
    expected = {s: fx.trl_logs(s) for s in range(1, 7)}
    expected[6] = {**expected[6], "eval_loss": 0.3, "eval_reward": 0.6, "train_runtime": 20.0,
                   "train_samples_per_second": 4.8, "total_flos": 0.0, "train_loss": 0.03}
    with rlobs.open_run(tmp_path / "run") as rec:
        assert rec.sql("SELECT step, zero_std_ratio FROM advantage ORDER BY step").fetchall() == [
            (s, fx.trl_logs(s)["frac_reward_zero_std"]) for s in range(1, 7)]
        # epoch is logged by three rows of step 6: the first is kept as is, the others are scalars too
        assert rec.sql("SELECT count(*) FROM scalar WHERE step = 6 AND name = 'epoch'").fetchall() == [(3,)]
    for s in range(1, 6):
        assert_nothing_lost(tmp_path / "run", TABLES["trl"], {s: expected[s]})
    doc = _doctor(tmp_path / "run")
    zero = [f for f in doc["findings"] if f["rule"] == "advantage-zero-std-groups"]
    assert [(f["first_step"], f["last_step"], f["evidence"][0]["observed"]) for f in zero] == [(4, 6, 0.875)]


def test_trl_console_printed_dicts_get_ordinal_steps_and_nan(tmp_path):
    src = fx.write_trl_console(tmp_path / "train.log", steps=6)
    report = import_run("trl", src, tmp_path / "run")
    assert (report.source_format, report.steps) == ("python-dicts", (1, 6))
    assert report.nonfinite == {"grad_norm": 1} and report.rows_without_step == 1
    assert any("steps 1..6 were assigned in line order" in n for n in report.notes)
    with rlobs.open_run(tmp_path / "run") as rec:
        rows = rec.sql("SELECT step, grad_norm, nonfinite FROM train_step ORDER BY step").fetchall()
    assert rows[2][0] == 3 and math.isnan(rows[2][1]) and rows[2][2] is True
    assert [(s, g) for s, g, _ in rows if s != 3] == [(s, float(f"{0.3 + 0.01 * s:.4g}")) for s in (1, 2, 4, 5, 6)]


# ---- TensorBoard and wandb ----
def test_tensorboard_from_summarywriter_detects_openrlhf_and_keeps_text_out(tmp_path):
    fx.write_tensorboard(tmp_path / "tb", "openrlhf", steps=8, prefix="train/")
    report = import_run("tensorboard", tmp_path / "tb", tmp_path / "run")
    assert (report.framework, report.source_format, report.steps) == ("openrlhf", "tensorboard", (1, 8))
    assert report.nonnumeric == {"val/generations/text_summary": "1 value(s), e.g. text summary"}
    expected = {s: {f"train/{k}": v for k, v in fx.openrlhf_logs(s).items()} for s in range(1, 9)}
    # SummaryWriter stores float32: compare with what it can hold
    import numpy as np

    expected = {s: {k: float(np.float32(v)) for k, v in d.items()} for s, d in expected.items()}
    assert_nothing_lost(tmp_path / "run", TABLES["openrlhf"], expected)
    doc = _doctor(tmp_path / "run")
    assert doc["insufficient_data"]["grad-norm-spike"] == "no train_step events with grad_norm"


def test_tensorboard_verl_with_a_truncated_event_file(tmp_path):
    fx.write_tensorboard(tmp_path / "tb", "verl", steps=8)
    (f,) = list((tmp_path / "tb").glob("events.out.tfevents*"))
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 37])  # writer killed mid-record
    report = import_run("verl", tmp_path / "tb", tmp_path / "run")
    assert report.framework == "verl" and report.steps == (1, 8)
    assert [(i.problem, "cut off" in i.detail) for i in report.issues] == [("truncated", True)]


def test_wandb_run_folder_openrlhf_history(tmp_path):
    fx.write_wandb_run(tmp_path / "wandb" / "run-20261129_1-abc", "openrlhf", steps=8)
    report = import_run("wandb", tmp_path / "wandb", tmp_path / "run")
    assert (report.framework, report.source_format, report.steps) == ("openrlhf", "wandb-history", (1, 8))
    assert report.nonnumeric == {"train/generated_samples": "1 value(s), e.g. dict table-file"}
    expected = {s: {**{f"train/{k}": v for k, v in fx.openrlhf_logs(s).items()}, "_step": s - 1,
                    "_runtime": 12.5 * s, "_timestamp": 1.7e9 + 12.5 * s} for s in range(1, 9)}
    assert_nothing_lost(tmp_path / "run", TABLES["openrlhf"], expected)


def test_wandb_csv_export_with_gaps(tmp_path):
    src = fx.write_wandb_csv(tmp_path / "history.csv", steps=8)
    report = import_run("wandb", src, tmp_path / "run")
    assert (report.framework, report.source_format) == ("verl", "wandb-csv")
    assert report.steps == (1, 8)  # training/global_step, not wandb's _step
    with rlobs.open_run(tmp_path / "run") as rec:
        assert [s for (s,) in rec.sql("SELECT step FROM train_step WHERE grad_norm IS NULL").fetchall()] == [4]


# ---- errors ----
@pytest.mark.parametrize("make, source, message", [
    (lambda p: p.write_text(""), "verl", "is empty"),
    (lambda p: p.write_text("\n\n  \n"), "trl", "is empty"),
    (lambda p: p.write_bytes(b"\x00\x01\x02binary" * 10), "verl", "binary file"),
    (lambda p: p.write_text("hello\nworld\n"), "openrlhf", "no metric lines recognised"),
    (lambda p: p.write_text('{"log_history": [}'), "trl", "no metric lines recognised"),
    (lambda p: p.write_text("a,b\n1,2\n"), "tensorboard", "no TensorBoard records"),
])
def test_unimportable_sources_fail_clearly_and_write_nothing(tmp_path, make, source, message):
    src = tmp_path / ("bad.csv" if source == "tensorboard" else "bad.log")
    make(src)
    with pytest.raises(ImportFailed, match=message):
        import_run(source, src, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    res = CliRunner().invoke(app, ["import", source, str(src), "--out", str(tmp_path / "run")])
    assert res.exit_code == exitcodes.INPUT and message in res.stderr


def test_refuses_to_write_into_an_existing_record_and_unknown_names(tmp_path):
    src = fx.write_verl_file_logger(tmp_path / "m.jsonl", steps=2)
    import_run("verl", src, tmp_path / "run")
    with pytest.raises(ImportFailed, match="already holds a run record"):
        import_run("verl", src, tmp_path / "run")
    with pytest.raises(ImportFailed, match="unknown source 'mlflow'; valid: verl, openrlhf, trl, areal, slime, nemo-rl, prime-rl, wandb, tensorboard"):
        import_run("mlflow", src, tmp_path / "x")
    with pytest.raises(ImportFailed, match="does not exist"):
        import_run("verl", tmp_path / "nope.jsonl", tmp_path / "y")


def test_unknown_metrics_only_become_scalars_with_a_note(tmp_path):
    src = tmp_path / "custom.jsonl"
    src.write_text("".join(json.dumps({"step": s, "my/metric": s * 1.5, "other": "text"}) + "\n" for s in (1, 2)))
    report = import_run("wandb", src, tmp_path / "run")
    assert report.framework == "generic" and report.unmapped == {"my/metric": 2}
    assert report.nonnumeric == {"other": "2 value(s), e.g. str"}
    assert any("kept as scalar events" in n for n in report.notes)
    with rlobs.open_run(tmp_path / "run") as rec:
        assert rec.sql("SELECT step, name, value, source FROM scalar ORDER BY step").fetchall() == [
            (1, "my/metric", 1.5, "generic:custom.jsonl"), (2, "my/metric", 3.0, "generic:custom.jsonl")]
    doc = _doctor(tmp_path / "run")
    assert doc["findings"] == [] and "grad-norm-spike" in doc["insufficient_data"]


def test_docs_mapping_tables_match_the_code():
    """docs/importers.md lists every mapped name with its target, per framework section."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "importers.md").read_text()
    sections = {"verl": "### verl", "openrlhf": "### OpenRLHF", "trl": "### TRL", "areal": "### AReaL",
                "slime": "### slime", "nemo-rl": "### NeMo-RL", "prime-rl": "### prime-rl"}
    for fw, table in TABLES.items():
        start = text.index(sections[fw])
        end = text.find("\n### ", start + 1)
        body = text[start:end if end > 0 else None]
        for name, target in table.exact.items():
            assert f"| `{name}` | `{target.label()}` |" in body, (fw, name)


def test_nested_json_metrics_are_flattened_with_slashes(tmp_path):
    src = tmp_path / "nested.jsonl"
    src.write_text(json.dumps({"step": 3, "actor": {"grad_norm": 0.7, "pg_loss": 0.1}, "critic": {"score": {"mean": 0.4}},
                               "sample": {"_type": "table-file", "path": "t.json"}}) + "\n")
    report = import_run("verl", src, tmp_path / "run")
    assert report.steps == (3, 3) and report.nonnumeric == {"sample": "1 value(s), e.g. dict table-file"}
    with rlobs.open_run(tmp_path / "run") as rec:
        assert rec.sql("SELECT step, grad_norm, loss, reward_mean FROM train_step").fetchall() == [(3, 0.7, 0.1, 0.4)]


def test_trl_output_folder_with_only_tensorboard_runs(tmp_path):
    fx.write_tensorboard(tmp_path / "out" / "runs" / "Nov29_09-00-00_host", "trl", steps=4, prefix="train/")
    report = import_run("trl", tmp_path / "out", tmp_path / "run")
    assert (report.framework, report.source_format, report.steps) == ("trl", "tensorboard", (1, 4))
    assert report.mapped["train/frac_reward_zero_std"] == "advantage.zero_std_ratio"
