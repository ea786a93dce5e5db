"""Weight sync on the real engine (fingerprints, tampering caught) and interruptible generation."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.slow


def _long_groups(tag: str, n: int = 6) -> list[dict]:
    # long chain prompts: each completion is tens of tokens (the model writes running sums)
    prompt = "+".join(["7"] * 20) + "="
    return [{"group_id": f"{tag}{i}", "prompt_idx": i, "prompt": prompt, "answer": 140, "n": 4, "seed": 1000 + i}
            for i in range(n)]


def _sync_meta(actors):
    import ray

    return ray.get(actors["trainer"].sync_out.remote())


def _wait_running(gen, tokens_before: int, timeout=60.0):
    """Until the submitted requests run and have produced tokens. The engine's token count is cumulative over the
    session's tests, so it must rise past its value before the submission: an abort that lands before the first
    token of the new requests leaves nothing to discard (the abort leg's aborted_tokens would be 0)."""
    import ray

    t = time.time()
    while time.time() - t < timeout:
        st = ray.get(gen.stats.remote())
        if st["running"] > 0 and st["tokens"] > tokens_before:
            return st
        time.sleep(0.02)
    raise AssertionError("generation never started")


@pytest.mark.parametrize("interrupt", ["resume", "abort"])
def test_interrupt_on_weight_update(stack, interrupt):
    import ray

    actors, model_dir, _ = stack
    gen = actors["generator"]
    ray.get(actors["trainer"].reset.remote(model_dir))
    before = ray.get(gen.stats.remote())
    base = before["version"]
    meta = _sync_meta(actors)
    groups = _long_groups(f"int-{interrupt}-")
    ray.get(gen.submit.remote(groups))
    _wait_running(gen, before["tokens"])
    rep = ray.get(gen.update_weights.remote(meta["ref"], base + 1, meta["fingerprints"], meta["shapes"], interrupt))
    assert rep["aborted"] > 0 and rep["mismatched"] == [] and rep["reset_confirmed"] is True
    done = []
    t = time.time()
    while len(done) < len(groups) and time.time() - t < 120:
        done += [g for g in ray.get(gen.poll.remote(0, 1.0)) if g["group_id"].startswith(f"int-{interrupt}-")]
    samples = [s for g in done for s in g["samples"]]
    assert len(samples) == 24
    interrupted = [s for s in samples if s["interrupts"] > 0]
    assert len(interrupted) == rep["aborted"]
    for s in samples:
        assert s["dispatch_version"] == base  # tagged at dispatch, never at completion
        assert len(s["logprobs"]) == len(s["completion_ids"])
    if interrupt == "resume":
        assert rep["resumed"] == rep["aborted"]
        mixed = [s for s in interrupted if s["min_token_version"] == base and s["max_token_version"] == base + 1]
        assert mixed, "a resumed completion carries tokens of both versions"
        assert all(s["aborted_tokens"] == 0 for s in samples)
    else:
        assert rep["regenerated"] == rep["aborted"]
        assert all(s["min_token_version"] == base + 1 for s in interrupted)  # regenerated from scratch
        assert sum(s["aborted_tokens"] for s in interrupted) > 0
    untouched = [s for s in samples if s["interrupts"] == 0]
    assert all(s["max_token_version"] == base for s in untouched if s["min_token_version"] == base) or not untouched


def test_tampered_payload_is_caught_by_engine_fingerprints(stack):
    import ray

    from trainer_ref.weight_sync import StagingBuffer, mapped, transfer

    actors, model_dir, _ = stack
    gen = actors["generator"]
    ray.get(actors["trainer"].reset.remote(model_dir))
    meta = _sync_meta(actors)
    assert meta["path"] == "shm" and meta["ref"][0]["path"] == "shm"  # same node, CPU: shared memory
    views, _ = mapped(meta["ref"][0]["handle"])  # the trainer's buffer, mapped here as the engine maps it
    state = {k: v.clone() for k, v in views.items()}
    orig = state["model.layers.1.mlp.down_proj.weight"][0, 0].item()
    state["model.layers.1.mlp.down_proj.weight"][0, 0] += 1.0
    bad = StagingBuffer(prefix="rlobs-test-tampered")
    bad.write(state, meta["version"])
    v = ray.get(gen.stats.remote())["version"]
    rep = ray.get(gen.update_weights.remote([transfer(bad, "shm")[0]], v + 1, meta["fingerprints"], meta["shapes"], "abort"))
    assert rep["mismatched"] == ["model.layers.1.mlp.down_proj.weight"]
    state["model.layers.1.mlp.down_proj.weight"][0, 0] = orig
    bad.write(state, meta["version"])  # the same layout: written in place, the engine's mapping stays valid
    rep = ray.get(gen.update_weights.remote([transfer(bad, "shm")[0]], v + 2, meta["fingerprints"], meta["shapes"], "abort"))
    assert rep["mismatched"] == [] and rep["tensors_present"] == len(state) and rep["path"] == "shm"
    fps = ray.get(gen.engine_fingerprints.remote(meta["shapes"]))
    assert fps == meta["fingerprints"]
    # the engine copied the weights out: rewriting the buffer it loaded from does not change what it serves
    bad.write({k: v + 0.5 for k, v in state.items()}, meta["version"] + 1)
    assert ray.get(gen.engine_fingerprints.remote(meta["shapes"])) == meta["fingerprints"]
    # the cross-node fallback: the flat bytes through the object store into the generator's own buffer
    obj = transfer(bad, "object_store")[0]
    rep = ray.get(gen.update_weights.remote([obj], v + 3, meta["fingerprints"], meta["shapes"], "abort"))
    assert rep["path"] == "object_store" and len(rep["mismatched"]) == len(meta["fingerprints"])
    rep = ray.get(gen.update_weights.remote(meta["ref"], v + 4, meta["fingerprints"], meta["shapes"], "abort"))
    assert rep["mismatched"] == []
    bad.close()
