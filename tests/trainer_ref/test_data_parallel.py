"""Data-parallel trainer ranks: a global token-mean loss, all-reduced gradients, the advantage probe's
rank check on real gloo ranks (Ray actors), and the rank_disagree fault found by the doctor."""

from __future__ import annotations

import pytest

from tests.trainer_ref.conftest import small_config

pytestmark = pytest.mark.slow


def test_two_ranks_train_in_lockstep_and_a_per_rank_denominator_is_diagnosed(stack, tmp_path):
    import ray

    import rlobs
    from rlobs.doctor import diagnose
    from trainer_ref.run import start_trainers, train

    actors, model_dir, _ = stack
    cfg = small_config(tmp_path / "dp", mode="separate_async", steps=4, dp=2, fault="rank_disagree", fault_onset=2)
    trainers = start_trainers(cfg, model_dir, {})
    try:
        dp_actors = {**actors, "trainer": trainers[0], "trainers": trainers}
        digests = []
        summary = train(cfg, actors=dp_actors, model_dir=model_dir,
                        on_step=lambda out: digests.append(ray.get([t.weights_digest.remote() for t in trainers])))
    finally:
        for t in trainers:
            ray.get(t.shutdown.remote())
            ray.kill(t)
    assert summary["steps"] == 4 and len(digests) == 4
    assert all(a == b for a, b in digests), "ranks diverged"  # gradients all-reduced: identical weights
    assert len({a for a, _ in digests}) == 4  # and they did train
    rec = rlobs.open_run(tmp_path / "dp")
    rows = rec.sql("select step, rank, token_denominator, ranks_agree from advantage order by step, rank").fetchall()
    assert [(st, rk) for st, rk, _, _ in rows] == [(s, r) for s in range(4) for r in (0, 1)]
    for st, rk, den, agree in rows:
        assert agree is (st < 2), (st, rk, agree)
    global_den = {st: den for st, rk, den, _ in rows if rk == 0}
    assert all(den < global_den[st] for st, rk, den, _ in rows if rk == 1 and st >= 2)  # its local count
    steps = rec.sql("select step, samples from train_step order by step").fetchall()
    assert steps == [(s, 16) for s in range(4)]  # rank 0 reports the whole step, once
    with rlobs.open_run(tmp_path / "dp") as record:
        report = diagnose(record)
    top = report.findings[0]
    assert (top.rule, top.first_step) == ("advantage-rank-disagreement", 2), [f.rule for f in report.findings]
