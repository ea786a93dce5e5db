"""The model judge in its own vLLM engine, and graders colocated in the generator process."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_model_judge_scores_reference_above_garbage(stack):
    import ray

    from trainer_ref.graders import GraderWorker, JudgeModel

    _, model_dir, _ = stack
    judge = ray.remote(num_cpus=0)(JudgeModel).remote(model_dir, 256)
    try:
        good, bad = ray.get(judge.score.remote([("12+30=", "#42"), ("12+30=", "9,9,9,9,9#0")]), timeout=300)
        assert 0.0 < bad < good <= 1.0
        w = GraderWorker("judge", timeout_s=60.0, judge=judge, init_telemetry=False)
        out = w.grade([{"sample_id": "a", "prompt": "12+30=", "completion": "#42", "answer": 42}])
        assert out[0]["outcome"] == "ok" and abs(out[0]["reward"] - good) < 1e-6
    finally:
        ray.kill(judge)


def test_colocated_grader_runs_in_the_generator_process(stack):
    import ray

    actors, _, _ = stack
    gen = actors["generator"]
    ray.get(gen.attach_grader.remote("rule", 5.0))
    samples = [{"sample_id": "x", "prompt": "1+2=", "completion": "#3", "answer": 3, "finish_reason": "stop"},
               {"sample_id": "y", "prompt": "1+2=", "completion": "#4", "answer": 3, "finish_reason": "stop"}]
    out = ray.get(gen.grade.remote(samples))
    assert [o["reward"] for o in out] == [1.0, 0.1]
