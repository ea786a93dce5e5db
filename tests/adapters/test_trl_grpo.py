"""A real ``trl.GRPOTrainer`` on CPU (tiny local Llama + BPE tokenizer, rule-based rewards) instrumented with
``probes.adapters.trl``; the record and ``rlobs doctor`` must agree with what TRL itself logged."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

import rlobs

MAX_GRAD_NORM = 0.4
STEPS = 5


def _easy_or_distinct(prompts, completions, **kwargs):
    """'easy' prompts: always 1 (their groups have zero std); others: parity of distinct characters."""
    return [1.0 if p.startswith("easy") else float(len(set(c)) % 2) for p, c in zip(prompts, completions)]


def _length_bonus(prompts, completions, completion_ids, **kwargs):
    return [0.5 if len(ids) < 8 else 0.0 for ids in completion_ids]


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory):
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from probes.adapters.trl import instrument
    from trainer_ref.model_build import build_tokenizer

    tmp = tmp_path_factory.mktemp("trl")
    tok = build_tokenizer(0, 262)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=128, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    ds = Dataset.from_list([{"prompt": f"{'easy' if i % 2 else 'calc'} {i}+{i}="} for i in range(64)])
    args = GRPOConfig(output_dir=str(tmp / "out"), per_device_train_batch_size=16, num_generations=4,
                      max_completion_length=8, max_steps=STEPS, logging_steps=1, report_to=[], use_cpu=True,
                      save_strategy="no", learning_rate=1e-2, beta=0.0, seed=0, dataloader_num_workers=0,
                      disable_tqdm=True, max_grad_norm=MAX_GRAD_NORM, reward_weights=[1.0, 2.0])
    trainer = GRPOTrainer(model=model, reward_funcs=[_easy_or_distinct, _length_bonus], args=args,
                          train_dataset=ds, processing_class=tok)
    run = tmp / "rec"
    cb = instrument(trainer, run_dir=str(run), record_text=True)
    trainer.train()
    logged = {h["step"]: h for h in trainer.state.log_history if "grad_norm" in h}
    return run, logged, trainer, cb


@pytest.mark.slow
def test_reward_functions_keep_their_names_for_trl(trl_run):
    _run, logged, trainer, _cb = trl_run
    assert [f.__name__ for f in trainer.reward_funcs] == ["_easy_or_distinct", "_length_bonus"]
    assert "rewards/_length_bonus/mean" in logged[1]


@pytest.mark.slow
def test_record_agrees_with_trl_logs_step_by_step(trl_run):
    run, logged, _trainer, _cb = trl_run
    assert sorted(logged) == list(range(1, STEPS + 1))
    with rlobs.open_run(run) as rec:
        steps = {s: (g, gc, c, rm, n, tok) for s, g, gc, c, rm, n, tok in rec.sql(
            "SELECT step, grad_norm, grad_norm_clipped, clipped, reward_mean, samples, tokens FROM train_step").fetchall()}
        adv = {s: (r, g, z) for s, r, g, z in rec.sql(
            "SELECT step, zero_std_ratio, groups, zero_std_groups FROM advantage").fetchall()}
        lengths = dict(rec.sql("SELECT step, avg(completion_tokens) FROM rollout GROUP BY step").fetchall())
        summary = dict(rec.sql("SELECT step, completion_tokens_mean FROM rollout_summary").fetchall())
        texts = rec.sql("SELECT count(*) FROM rollout WHERE prompt LIKE 'easy%' OR prompt LIKE 'calc%'").fetchall()[0][0]
        calls = rec.sql("SELECT grader_kind, count(*) FROM grader_call GROUP BY ALL ORDER BY 1").fetchall()
        assert rec.sql("SELECT count(*) FROM telemetry WHERE dropped > 0").fetchall()[0][0] == 0
    assert sorted(steps) == sorted(adv) == list(range(1, STEPS + 1))
    clipped_any = False
    for s, h in logged.items():
        g, gc, clipped, reward_mean, samples, tokens = steps[s]
        assert g == h["grad_norm"]  # TRL's pre-clip norm, as logged
        # independently measured after clipping, before optimizer.step(): min(pre, max) (clip_grad_norm_'s 1e-6)
        assert gc == pytest.approx(min(h["grad_norm"], MAX_GRAD_NORM), rel=1e-4)
        assert clipped == (h["grad_norm"] > MAX_GRAD_NORM)
        clipped_any |= clipped
        assert reward_mean == pytest.approx(h["reward"])
        ratio, groups, zero = adv[s]
        assert groups == 16 // 4
        assert ratio == pytest.approx(h["frac_reward_zero_std"])  # measured from raw rewards by the wrappers
        assert zero == round(h["frac_reward_zero_std"] * groups)
        assert samples == 16 and tokens == pytest.approx(h["completions/mean_length"] * 16)
        assert lengths[s] == pytest.approx(h["completions/mean_length"])
        assert summary[s] == pytest.approx(h["completions/mean_length"])
    assert texts == 16 * STEPS
    assert calls == [("_easy_or_distinct", 16 * STEPS), ("_length_bonus", 16 * STEPS)]
    assert any(h["grad_norm"] <= MAX_GRAD_NORM for h in logged.values()) or clipped_any


@pytest.mark.slow
def test_doctor_on_the_trl_record_reports_trls_numbers(trl_run):
    from typer.testing import CliRunner

    from rlobs.cli import app

    run, logged, _trainer, _cb = trl_run
    # every step has >= 50% zero-std groups ('easy' prompts): at ratio 0.5 the rule must fire on all steps.
    # 4 groups a step, 20 in the run: the pooled share's Wilson lower bound (widened for 5 steps) is judged
    # against min_share 0.3 (at the default 0.6, 20 groups at 70 % are not evidence enough)
    res = CliRunner().invoke(app, ["doctor", str(run), "--json", "--threshold", "advantage-zero-std-groups.ratio=0.5",
                                   "--threshold", "advantage-zero-std-groups.min_share=0.3"])
    report = json.loads(res.stdout)
    assert res.exit_code == report["exit_code"] == 1, res.stdout
    zero = [f for f in report["findings"] if f["rule"] == "advantage-zero-std-groups"]
    assert len(zero) == 1
    # the story of this run leads: groups without signal (steps with zero grad norm follow from them), not a
    # "spike" measured against a zero baseline
    assert report["findings"][0]["rule"] == "advantage-zero-std-groups", report["findings"]
    assert not any(f["rule"] == "grad-norm-spike" and f["severity"] != "info" for f in report["findings"])
    # the rule's window from TRL's own numbers: runs of >= 2 consecutive steps with frac >= 0.5
    hot = sorted(s for s, h in logged.items() if h["frac_reward_zero_std"] >= 0.5)
    runs, start = [], None
    for i, s in enumerate(hot):
        if start is None:
            start = s
        if i + 1 == len(hot) or hot[i + 1] != s + 1:
            if s - start + 1 >= 2:
                runs.append((start, s))
            start = None
    assert runs, f"TRL logged no two consecutive steps with >= 50% zero-std groups: {logged}"
    first, last = runs[0][0], runs[-1][1]
    assert (zero[0]["first_step"], zero[0]["last_step"]) == (first, last)
    worst = max(logged[s]["frac_reward_zero_std"] for s in range(first, last + 1))
    from rlobs.detect import wilson

    k = sum(round(logged[s]["frac_reward_zero_std"] * 4) for s in range(first, last + 1))
    assert wilson(k, 4 * (last - first + 1), 1 - 0.05 / STEPS)[0] >= 0.3, (k, first, last)  # corrected: 5 steps
    assert zero[0]["evidence"][1]["observed"].startswith(f"{k}/{4 * (last - first + 1)} ")
    assert zero[0]["evidence"][0]["observed"] == pytest.approx(worst, abs=1e-4)
    assert "grad-norm-nonfinite" in report["healthy"]
    assert report["rule_errors"] == {}
    # the grad-norm spike detector saw exactly TRL's finite norms
    assert all(math.isfinite(h["grad_norm"]) for h in logged.values())
    assert "weight-sync-slow" in report["insufficient_data"]


def test_parity_and_is_ratio_come_from_trls_vllm_metrics(tmp_path: Path):
    """TRL logs these only with vLLM importance-sampling correction (not on CPU): feed on_log the names
    GRPOTrainer uses, through a real callback and recorder."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from probes.adapters.trl import RlobsGRPOCallback

    cb = RlobsGRPOCallback(str(tmp_path / "r"))
    args = TrainingArguments(output_dir=str(tmp_path / "o"), use_cpu=True, report_to=[], max_grad_norm=1.0)
    state, control = TrainerState(), TrainerControl()
    cb.on_train_begin(args, state, control)
    for step, diff in ((1, 0.002), (2, 0.02)):
        cb.on_step_begin(args, state, control)
        state.global_step = step
        cb.on_step_end(args, state, control)
        cb.on_log(args, state, control, logs={
            "loss": 0.1, "grad_norm": 0.5 * step, "learning_rate": 1e-6, "sampling/sampling_logp_difference/mean": diff,
            "sampling/sampling_logp_difference/max": 10 * diff, "sampling/importance_sampling_ratio/mean": 1.01,
            "sampling/importance_sampling_ratio/max": 1.5, "sampling/importance_sampling_ratio/min": 0.7,
            "frac_reward_zero_std": 0.25})
    cb.on_train_end(args, state, control)
    with rlobs.open_run(tmp_path / "r") as rec:
        assert rec.sql("SELECT step, mean_abs_dlogp, max_abs_dlogp FROM parity ORDER BY step").fetchall() == [
            (1, 0.002, 0.02), (2, 0.02, 0.2)]
        assert rec.sql("SELECT step, is_ratio_mean, is_ratio_max FROM staleness ORDER BY step").fetchall() == [
            (1, 1.01, 1.5), (2, 1.01, 1.5)]
        # no reward wrappers ran: the zero-std share is TRL's logged one
        assert rec.sql("SELECT step, zero_std_ratio FROM advantage ORDER BY step").fetchall() == [(1, 0.25), (2, 0.25)]
        assert rec.sql("SELECT step, grad_norm, loss FROM train_step ORDER BY step").fetchall() == [(1, 0.5, 0.1), (2, 1.0, 0.1)]
        assert rec.sql("SELECT name FROM scalar WHERE step = 1").fetchall() == [("sampling/importance_sampling_ratio/min",)]
    from rlobs.doctor import diagnose

    with rlobs.open_run(tmp_path / "r") as rec:
        report = diagnose(rec, rule_ids=["parity-drift"])
    assert [(f.rule, f.first_step, str(f.severity)) for f in report.findings] == [("parity-drift", 2, "critical")]


def test_wrappers_keep_sync_async_and_errors_and_skip_evaluation(tmp_path: Path):
    """The wrappers as TRL calls them (keyword arguments, trainer_state), on a real recorder."""
    import asyncio

    from transformers import TrainerState

    from probes.adapters.trl import RlobsGRPOCallback

    rec = rlobs.init(tmp_path / "r", component="trainer", prometheus=False, set_global=False)
    cb = RlobsGRPOCallback()
    cb._rec = rec

    async def judge(prompts, completions, **kw):
        return [0.5 for _ in completions]

    def broken(prompts, completions, **kw):
        raise RuntimeError("grader down")

    def rule(prompts, completions, **kw):
        return [None if c == "skip" else 1.0 for c in completions]

    w_judge, w_broken, w_rule = cb.wrap_reward_funcs([judge, broken, rule])
    assert (w_judge.__name__, w_broken.__name__, w_rule.__name__) == ("judge", "broken", "rule")
    state = TrainerState(global_step=2)
    kw = dict(prompts=["p", "p"], completions=["a", "skip"], completion_ids=[[1, 2], [3]], trainer_state=state)
    assert asyncio.run(w_judge(**kw)) == [0.5, 0.5]
    with pytest.raises(RuntimeError, match="grader down"):
        w_broken(**kw)
    assert w_rule(**kw) == [1.0, None]

    class Evaluating:  # the model object TRL puts in eval mode during evaluation
        training = False

    cb._model = Evaluating()
    w_rule(**kw)  # an evaluation batch: not recorded
    rec.close()
    with rlobs.open_run(tmp_path / "r") as r:
        assert r.sql("SELECT step, grader_kind, outcome, reward FROM grader_call ORDER BY grader_kind, sample_id"
                     ).fetchall() == [(3, "broken", "error", None), (3, "judge", "ok", 0.5), (3, "judge", "ok", 0.5),
                                      (3, "rule", "ok", 1.0), (3, "rule", "skipped", None)]
        assert r.sql("SELECT sample_id, group_id, completion_tokens FROM rollout ORDER BY sample_id").fetchall() == [
            ("s3-0", "s3-g0", 2), ("s3-1", "s3-g1", 1)]


def test_steps_trl_does_not_log_keep_the_measured_post_clip_norm(tmp_path: Path):
    """logging_steps > 1: no on_log for a step. Unclipped, pre-clip == post-clip; clipped, it is unknown."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from probes.adapters.trl import RlobsGRPOCallback

    model = torch.nn.Linear(4, 1, bias=False)
    cb = RlobsGRPOCallback(str(tmp_path / "r"))
    args = TrainingArguments(output_dir=str(tmp_path / "o"), use_cpu=True, report_to=[], max_grad_norm=1.0)
    state, control = TrainerState(), TrainerControl()
    cb.on_train_begin(args, state, control, model=model)
    norms = []
    for step, scale in ((1, 0.01), (2, 100.0)):
        cb.on_step_begin(args, state, control)
        model.zero_grad()
        (model(torch.ones(1, 4)).sum() * scale).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
        cb.on_pre_optimizer_step(args, state, control, model=model)
        state.global_step = step
        cb.on_step_end(args, state, control)
    cb.on_train_end(args, state, control)
    with rlobs.open_run(tmp_path / "r") as rec:
        rows = rec.sql("SELECT step, grad_norm, grad_norm_clipped, clipped FROM train_step ORDER BY step").fetchall()
    assert norms[0] < 1.0 < norms[1]
    assert rows[0][:2] == (1, pytest.approx(norms[0])) and rows[0][2] == pytest.approx(norms[0]) and rows[0][3] is False
    assert rows[1][0] == 2 and rows[1][1] is None and rows[1][2] == pytest.approx(1.0, rel=1e-4)


@pytest.mark.slow
def test_rlobs_import_of_the_output_folder_trl_itself_wrote(trl_run, tmp_path):
    """After the fact: the trainer saves its state as in every checkpoint (checkpoint-N/trainer_state.json,
    ``Trainer.state.save_to_json``), ``rlobs import trl`` reads the output folder, and the imported record's
    per-step numbers are TRL's own."""
    from rlobs.importers import import_run

    _run, logged, trainer, _cb = trl_run
    ckpt = tmp_path / "out" / f"checkpoint-{STEPS}"
    ckpt.mkdir(parents=True)
    trainer.state.save_to_json(str(ckpt / "trainer_state.json"))
    report = import_run("trl", tmp_path / "out", tmp_path / "imported")
    assert report.framework == "trl" and report.steps[1] == STEPS and report.issues == []
    with rlobs.open_run(tmp_path / "imported") as rec:
        norms = dict(rec.sql("SELECT step, grad_norm FROM train_step WHERE grad_norm IS NOT NULL").fetchall())
        zero = dict(rec.sql("SELECT step, zero_std_ratio FROM advantage").fetchall())
        ent = dict(rec.sql("SELECT step, entropy FROM train_step WHERE entropy IS NOT NULL").fetchall())
    assert norms == {s: h["grad_norm"] for s, h in logged.items()}
    assert zero == pytest.approx({s: h["frac_reward_zero_std"] for s, h in logged.items()})
    assert ent == pytest.approx({s: h["entropy"] for s, h in logged.items() if "entropy" in h})
