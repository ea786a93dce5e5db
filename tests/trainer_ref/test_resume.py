"""Checkpoint and resume: a resumed run neither skips nor repeats samples."""

from __future__ import annotations

import pytest

from tests.trainer_ref.conftest import small_config

pytestmark = pytest.mark.slow


def test_sync_resume_consumes_exactly_the_uninterrupted_sequence(stack, tmp_path):
    from trainer_ref import checkpoint
    from trainer_ref.run import train

    actors, model_dir, _ = stack
    straight = train(small_config(tmp_path / "a", mode="sync", steps=4), actors=actors, model_dir=model_dir)
    first = train(small_config(tmp_path / "b", mode="sync", steps=4, stop_after=2), actors=actors, model_dir=model_dir)
    assert first["steps"] == 2 and first["version"] == 2
    second = train(small_config(tmp_path / "b", mode="sync", steps=4, resume=True), actors=actors, model_dir=model_dir)
    assert second["resumed"] and second["steps"] == 4 and second["version"] == 4
    # the same prompts, each exactly once, step by step (order within a step is completion order)
    expected = [sorted(f"p{i}" for i in range(k * 4, k * 4 + 4)) for k in range(4)]
    for run in (straight, second):
        assert [sorted(run["consumed_groups"][k * 4:k * 4 + 4]) for k in range(4)] == expected
    st = checkpoint.read_state(checkpoint.latest(tmp_path / "b"))
    assert st["cursor"] == 16 and st["version"] == 4
    assert sorted(k for k, v in st["ledger"].items() if v == "consumed") == sorted(
        f"p{i}-s{j}" for i in range(16) for j in range(4))


def test_separate_async_resume_accounts_for_every_sample(stack, tmp_path):
    from trainer_ref import checkpoint
    from trainer_ref.run import train

    actors, model_dir, _ = stack
    cfg = dict(mode="separate_async", steps=4, max_staleness=1)
    first = train(small_config(tmp_path / "c", stop_after=2, checkpoint_every=1, **cfg), actors=actors,
                  model_dir=model_dir)
    assert (checkpoint.step_dir(tmp_path / "c", 1) / "state.json").exists()  # drained mid-run checkpoint
    st1 = checkpoint.read_state(checkpoint.latest(tmp_path / "c"))
    assert st1["step"] == 2
    buffered = {g["group_id"] for g in st1["buffer"]}
    # dispatched and unconsumed stays under (max_staleness + 1) x groups_per_step across the mid-run checkpoint: the
    # groups its drain carried over count against the bound (they did not, and 12 were buffered, 7 Dec 2026)
    assert len(buffered) <= 2 * 4
    second = train(small_config(tmp_path / "c", resume=True, **cfg), actors=actors, model_dir=model_dir)
    assert first["steps"] == 2 and second["steps"] == 4 and second["version"] == 4
    st = checkpoint.read_state(checkpoint.latest(tmp_path / "c"))
    consumed = st["consumed_groups"]
    assert len(consumed) == len(set(consumed)) == 16  # nothing consumed twice
    assert consumed[:8] == st1["consumed_groups"]
    # groups buffered at the checkpoint are used (or dropped as stale) after resume, not regenerated
    dropped = {sid.rsplit("-s", 1)[0] for sid, v in st["ledger"].items() if v == "dropped"}
    assert buffered <= set(consumed[8:]) | dropped
    # every prompt ever dispatched is consumed, dropped or still buffered: none skipped
    final_buffer = {g["group_id"] for g in st["buffer"]}
    assert set(consumed) | dropped | final_buffer == {f"p{i}" for i in range(st["cursor"])}
    assert not (set(consumed) & dropped) and not (set(consumed) & final_buffer)
    states = set(st["ledger"].values())
    assert states <= {"consumed", "dropped", "graded"}


def test_separate_async_resumes_a_buffer_larger_than_the_queue(stack, tmp_path):
    """A stopped separate_async run drains what was in flight into its buffer: up to (max_staleness + 1) x
    groups_per_step groups, more than the graded queue holds. The resume used to put them all into that bounded
    queue before anything consumed it and blocked for good (a finished run of the early-warning bench, 52 groups
    against a capacity of 32, 5 Dec 2026). Now they are taken first, oldest first, and nothing is lost."""
    import threading

    from trainer_ref import checkpoint
    from trainer_ref.run import train

    actors, model_dir, _ = stack
    cfg = dict(mode="separate_async", steps=3, max_staleness=3, queue_capacity=2)
    train(small_config(tmp_path / "d", stop_after=2, **cfg), actors=actors, model_dir=model_dir)
    st1 = checkpoint.read_state(checkpoint.latest(tmp_path / "d"))
    assert len(st1["buffer"]) > 2  # the precondition: more than the queue's capacity was buffered
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(train(small_config(tmp_path / "d", resume=True, **cfg),
                                                         actors=actors, model_dir=model_dir)), daemon=True)
    t.start()
    t.join(timeout=300)
    assert not t.is_alive(), "the resume is blocked"
    assert out["resumed"] and out["steps"] == 3
    st = checkpoint.read_state(checkpoint.latest(tmp_path / "d"))
    consumed = st["consumed_groups"]
    assert len(consumed) == len(set(consumed)) == 12
    # the oldest buffered groups are the first taken after the resume (or dropped as stale)
    dropped = {sid.rsplit("-s", 1)[0] for sid, v in st["ledger"].items() if v == "dropped"}
    first_after = [g for g in (x["group_id"] for x in st1["buffer"]) if g not in dropped][:4]
    assert consumed[8:12] == first_after or set(first_after) <= set(consumed[8:])
    final_buffer = {g["group_id"] for g in st["buffer"]}
    assert set(consumed) | dropped | final_buffer == {f"p{i}" for i in range(st["cursor"])}
