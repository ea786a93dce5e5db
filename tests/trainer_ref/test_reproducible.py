"""The same seed reproduces a run: two fresh sync runs (own actors, own vLLM engines) with
``deterministic`` on produce the same samples, rewards and held-out evaluations, step for step."""

from __future__ import annotations

import pytest

from tests.trainer_ref.conftest import small_config

pytestmark = pytest.mark.slow


def test_sync_run_with_the_same_seed_is_bit_reproducible(stack, tmp_path):
    import ray

    from trainer_ref.run import train

    _, model_dir, _ = stack  # the session's Ray and model; each run below starts and stops its own actors
    runs = [train(small_config(tmp_path / f"r{i}", mode="sync", steps=3, eval_every=3, deterministic=True),
                  model_dir=model_dir) for i in range(2)]
    assert ray.is_initialized()
    a, b = runs
    assert len(a["reward_curve"]) == 3 and a["steps"] == b["steps"] == 3
    assert a["reward_curve"] == b["reward_curve"]
    assert a["evals"] == b["evals"] and len(a["evals"]) >= 2
    assert a["consumed_groups"] == b["consumed_groups"]
    # and the recorded samples themselves (completion text and the generator's log-probs) agree
    import rlobs

    def samples(run_dir):
        q = "select sample_id, completion, logprobs from rollout order by sample_id, ts_ns"
        return rlobs.open_run(run_dir).sql(q).fetchall()

    sa, sb = samples(tmp_path / "r0"), samples(tmp_path / "r1")
    assert sa and sa == sb
