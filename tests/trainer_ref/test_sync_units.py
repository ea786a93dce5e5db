"""Weight-sync stages without an engine: fingerprints, engine layout, staging torn reads; the
optimiser checkpoint round trip; the staleness admission rule."""

from __future__ import annotations

import sys
import threading
import time

import pytest
import torch

from trainer_ref import checkpoint, weight_sync


def _tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False))


def test_dump_fingerprints_engine_layout():
    m = _tiny_model()
    d = weight_sync.dump_weights(m, 3, expected=m.state_dict().keys())
    assert "model.layers.0.self_attn.qkv_proj.weight" in d.fingerprints
    assert "model.layers.0.self_attn.q_proj.weight" not in d.fingerprints
    assert d.shapes["model.layers.0.mlp.gate_up_proj.weight"] == [64, 16]
    with torch.no_grad():
        m.model.layers[0].self_attn.k_proj.weight[0, 0] += 1
    d2 = weight_sync.dump_weights(m, 4)
    diff = [k for k in d.fingerprints if d.fingerprints[k] != d2.fingerprints[k]]
    assert diff == ["model.layers.0.self_attn.qkv_proj.weight"] and d.digest != d2.digest
    with pytest.raises(RuntimeError, match="missing"):
        weight_sync.dump_weights(m, 5, expected=["not.there"])


def test_gpu_paths_fingerprint_with_the_device_kind_through_every_stage_that_makes_a_dump():
    """The kind a sync fingerprints with follows its path (GPU: ``device``, computed where the tensors live); a
    dump carries it, the fused tensors of the engine layout are hashed part by part in it, and the
    incomplete-dump fault re-fingerprints in the dump's kind, so a comparison never mixes kinds."""
    from probes.fingerprint import tensor_fingerprint
    from trainer_ref import faults
    from trainer_ref.config import Config

    assert [weight_sync.fingerprint_kind(p) for p in weight_sync.PATHS] == ["bytes", "bytes", "device", "device"]
    m = _tiny_model()
    layout = weight_sync.EngineLayout.from_model(m, packed={"qkv_proj": ["q_proj", "k_proj", "v_proj"],
                                                            "gate_up_proj": ["gate_proj", "up_proj"]})
    d = weight_sync.dump_weights(m, 3, layout=layout, flatten=False, kind="device")
    b = weight_sync.dump_weights(m, 3, layout=layout, flatten=False)
    assert d.kind == "device" and b.kind == "bytes" and d.fingerprints.keys() == b.fingerprints.keys()
    assert not set(d.fingerprints.values()) & set(b.fingerprints.values())
    qkv = torch.cat([getattr(m.model.layers[0].self_attn, n).weight for n in ("q_proj", "k_proj", "v_proj")])
    assert d.fingerprints["model.layers.0.self_attn.qkv_proj.weight"] == tensor_fingerprint(qkv, kind="device")
    f = faults.from_config(Config(run_dir="/tmp/unused", fault="incomplete_dump", fault_onset=0).to_dict())
    cut = faults.dump(f, 0, d, layout)
    assert cut.kind == "device" and "model.norm.weight" not in cut.fingerprints
    assert {k: v for k, v in d.fingerprints.items() if k != "model.norm.weight"} == cut.fingerprints


def test_staging_detects_torn_reads_only_without_lock():
    """The trainer's staging buffer is probes' one StagingBuffer (shared memory, seqlock)."""
    import numpy as np

    from probes.staging import StagingBuffer

    assert weight_sync.StagingBuffer is StagingBuffer
    buf = weight_sync.StagingBuffer()
    state = {f"t{i}": np.full(1 << 18, float(i), dtype=np.float32) for i in range(8)}
    buf.write(state)
    stop = threading.Event()

    def writer():
        while not stop.is_set():
            buf.write(state)

    th = threading.Thread(target=writer)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # let the writer interleave with the reader
    th.start()
    try:
        unlocked = [buf.read(use_lock=False).torn for _ in range(40)]
        locked = [buf.read(use_lock=True) for _ in range(20)]
    finally:
        stop.set()
        th.join()
        sys.setswitchinterval(old)
        buf.close()
    assert any(unlocked)
    assert not any(r.torn for r in locked) and all(r.seq_before % 2 == 0 for r in locked)


def test_optimizer_checkpoint_round_trip(tmp_path):
    m = _tiny_model()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    m(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    opt.step()
    checkpoint.save_trainer(m, opt, tmp_path)
    m2 = _tiny_model()
    with torch.no_grad():
        for p in m2.parameters():
            p.zero_()
    opt2 = torch.optim.AdamW(m2.parameters(), lr=1e-3)
    checkpoint.load_trainer(m2, opt2, tmp_path)
    for a, b in zip(m.state_dict().values(), m2.state_dict().values()):
        assert torch.equal(a, b)
    s1, s2 = opt.state_dict(), opt2.state_dict()
    for pid in s1["state"]:
        for k in s1["state"][pid]:
            assert torch.equal(torch.as_tensor(s1["state"][pid][k]), torch.as_tensor(s2["state"][pid][k]))
    assert not list(tmp_path.glob("*.pt")) and not list(tmp_path.glob("*.pkl"))


def test_admission_drops_stale_and_expired_groups():
    """Admission goes through probes.StalenessProbe.admit on the group's dispatch tag: staleness is
    checked first, then the age since dispatch; every sample of a dropped group is dropped in the ledger."""
    from trainer_ref.config import Config
    from trainer_ref.orchestrator import Orchestrator
    from trainer_ref.records import Group, Sample

    o = Orchestrator(Config(max_staleness=2, rollout_ttl_s=10.0, progress=False), "", {},
                     {"generator": None, "trainer": None, "graders": []})
    o.version = 5
    now = time.time()

    def g(v, age, n=2):
        gid = f"g{v}{age}"
        samples = [Sample(sample_id=f"{gid}-s{j}", group_id=gid, dispatch_version=v,
                          dispatch_ns=int((now - age) * 1e9) + j, t_done=now, gen_seconds=age,
                          completion_ids=[1] * (j + 1)) for j in range(n)]
        for s in samples:
            o.ledger.mark(s.sample_id, gid, "generated")
            o.ledger.mark(s.sample_id, gid, "graded")
        return Group(group_id=gid, prompt_idx=0, prompt="", answer=None, n=n, seed=0, samples=samples)

    assert o.admit(g(3, 0)) is True  # staleness 2 == bound
    assert o.admit(g(2, 0)) is False  # staleness 3 > bound
    assert o.admit(g(5, 11)) is False  # dispatched 11 s ago > TTL 10 s
    assert o.dropped == {"stale": 2, "ttl": 2}
    assert o.ledger.counts() == {"graded": 2, "dropped": 4}
    assert o.admission.drops == {"stale": 2, "ttl": 2}
    for grp in (g(1, 0), g(4, 1)):
        o.buffer.append(grp)
    batch = o.take_from_buffer(2)
    assert [x.group_id for x in batch] == ["g41"] and o.dropped == {"stale": 4, "ttl": 2}
    assert o.ledger.states["g10-s0"] == o.ledger.states["g10-s1"] == "dropped"
    assert o.ledger.states["g41-s1"] == "graded"
