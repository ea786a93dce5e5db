"""Metric maps researched from each framework's source, and the user's own map (--map FILE)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import rlobs
from rlobs.cli import app
from rlobs.importers import TABLES, ImportFailed, import_run
from rlobs.importers.mapping import parse_target


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("fw, row, checks", [
    ("verl", {"step": 3, "data": {"training/off_policy/trajectory_staleness/max": 5,
                                  "training/off_policy/trajectory_staleness/mean": 2.5, "trainer/idle_ratio": 0.7,
                                  "rollout_corr/k3_kl": 0.02}},
     [("SELECT max_staleness, mean_staleness FROM staleness", (5, 2.5)),
      ("SELECT kl_k3 FROM parity", (0.02,)),
      ("SELECT value FROM scalar WHERE name = 'rlobs/trainer_idle_ratio'", (0.7,)),
      ("SELECT value FROM scalar WHERE name = 'trainer/idle_ratio'", (0.7,))]),
    ("slime", {"train/step": 3, "train/train_rollout_logprob_abs_diff": 0.004, "train/grad_norm": 0.3,
               "perf/train_wait_time": 12.0},
     [("SELECT mean_abs_dlogp FROM parity", (0.004,)),
      ("SELECT grad_norm, data_wait_s FROM train_step", (0.3, 12.0))]),
    ("prime-rl", {"step": 3, "off_policy/max": 2.0, "mismatch_kl/all/mean": 0.001, "optim/grad_norm": 0.2},
     [("SELECT max_staleness FROM staleness", (2,)), ("SELECT kl_k1 FROM parity", (0.001,))]),
    ("nemo-rl", {"step": 3, "train/gen_kl_error": 0.0005, "timing/train/generation": 30.0, "train/grad_norm": 0.1},
     [("SELECT kl_k1 FROM parity", (0.0005,)), ("SELECT seconds FROM phase WHERE phase = 'generation'", (30.0,))]),
    ("areal", {"step": 3, "ppo_actor/update/grad_norm": 0.4, "ppo_actor/no_eos_ratios/avg": 0.3},
     [("SELECT grad_norm FROM train_step", (0.4,)), ("SELECT truncated_ratio FROM rollout_summary", (0.3,))]),
    ("openrlhf", {"train/global_step": 3, "train/vllm_kl": 0.002, "train/policy_loss": 0.1},
     [("SELECT kl_k1 FROM parity", (0.002,))]),
])
def test_each_framework_table_maps_its_rule_inputs(tmp_path, fw, row, checks):
    src = _jsonl(tmp_path / "m.jsonl", [row])
    report = import_run(fw, src, tmp_path / "run")
    assert report.framework == fw and report.steps == (3, 3)
    with rlobs.open_run(tmp_path / "run") as rec:
        for sql, want in checks:
            assert tuple(rec.sql(sql + " LIMIT 1").fetchall()[0]) == pytest.approx(want), sql


def test_every_table_target_round_trips_through_the_documented_notation():
    for fw, table in TABLES.items():
        for name, target in table.exact.items():
            again = parse_target(target.label())
            assert (again.kind, again.field, again.op, dict(again.fixed)) == (
                target.kind, target.field, target.op, {k: str(v) for k, v in target.fixed.items()}), (fw, name)


def test_user_map_file_adds_and_overrides_names(tmp_path):
    src = _jsonl(tmp_path / "m.jsonl", [{"step": s, "data": {"my/gnorm": 0.5 * s, "my/judge_s": 3.0,
                                                            "actor/grad_norm": 9.0}} for s in (1, 2)])
    mp = tmp_path / "names.json"
    mp.write_text(json.dumps({"my/gnorm": "train_step.grad_norm", "my/judge_s": "phase.seconds [phase=grading]",
                              "actor/grad_norm": "scalar.value [name=rlobs/other_norm] (alias)"}))
    res = CliRunner().invoke(app, ["import", "verl", str(src), "--out", str(tmp_path / "run"), "--map", str(mp)])
    assert res.exit_code == 0, res.output
    with rlobs.open_run(tmp_path / "run") as rec:
        assert rec.sql("SELECT step, grad_norm FROM train_step ORDER BY step").fetchall() == [(1, 0.5), (2, 1.0)]
        assert rec.sql("SELECT seconds FROM phase WHERE phase = 'grading' AND step = 1").fetchall() == [(3.0,)]
        assert rec.sql("SELECT count(*) FROM scalar WHERE name = 'actor/grad_norm'").fetchall() == [(2,)]


@pytest.mark.parametrize("content, message", [
    ("{not json", "not JSON"),
    ('["a"]', "expected a JSON object of strings"),
    ('{"x": "train_step.nope"}', "no such field"),
    ('{"x": "nokind.value"}', "target kind 'nokind' unknown"),
    ('{"x": "train_step grad_norm"}', "is not 'kind.field"),
])
def test_bad_map_files_fail_clearly(tmp_path, content, message):
    src = _jsonl(tmp_path / "m.jsonl", [{"step": 1, "data": {"a": 1}}])
    mp = tmp_path / "names.json"
    mp.write_text(content)
    with pytest.raises(ImportFailed, match=message):
        import_run("verl", src, tmp_path / "run", map_file=mp)
    assert not (tmp_path / "run").exists()
