"""The weight-sync paths without an engine: stage order and fused fingerprints, path choice, the shared
staging buffer read from another process, the object-store fallback through real Ray, GPU bucket
planning and IPC handle encoding (the GPU runs themselves: ``test_gpu_sync.py``)."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch

from trainer_ref import gpu_sync, weight_sync


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg)


LAYOUT = weight_sync.EngineLayout({"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]},
                                  {"lm_head.weight": "model.embed_tokens.weight"})


def test_dump_is_views_in_stage_order_and_fused_fingerprints_need_no_concatenation():
    m = _model()
    d = weight_sync.dump_weights(m, 1, expected=m.state_dict().keys(), layout=LAYOUT)
    names = list(d.state)
    a = "model.layers.0.self_attn."
    i = names.index(a + "q_proj.weight")
    assert names[i:i + 3] == [a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"]
    assert "lm_head.weight" not in d.state
    assert d.state[a + "q_proj.weight"].data_ptr() == m.model.layers[0].self_attn.q_proj.weight.data_ptr()  # no copy
    assert d.fingerprints == {k: weight_sync.tensor_fingerprint(v) for k, v in LAYOUT.apply(m.state_dict()).items()}
    buf = weight_sync.StagingBuffer(prefix="rlobs-test-order")
    try:
        buf.write(d.state, 1)
        views, hdr = weight_sync.mapped(buf.handle())
        fused = weight_sync.fused_views(views, LAYOUT)
        assert {k: weight_sync.concat_fingerprint(v) for k, v in fused.items()} == d.fingerprints
        q, v = views[a + "q_proj.weight"], views[a + "v_proj.weight"]
        assert v.data_ptr() + v.numel() * 4 - q.data_ptr() == sum(p.numel() for p in fused[a + "qkv_proj.weight"]) * 4
        assert int(hdr[0]) == buf.seq == 2
    finally:
        buf.close()


def test_path_is_chosen_by_placement_and_can_be_forced():
    assert weight_sync.choose_path("cpu", "n1", "n1") == "shm"
    assert weight_sync.choose_path("cpu", "n1", "n2") == "object_store"
    assert weight_sync.choose_path("cpu", None, None) == "shm"
    assert weight_sync.choose_path("cuda", "n1", "n1") == "cuda_ipc"
    assert weight_sync.choose_path("cuda", "n1", "n2") == "nccl"
    assert weight_sync.choose_path("cuda", "n1", "n1", engine_device="cpu") == "shm"
    assert weight_sync.choose_path("cpu", "n1", "n1", "object_store") == "object_store"
    with pytest.raises(ValueError, match="unknown weight_sync_path"):
        weight_sync.choose_path("cpu", "n1", "n1", "carrier_pigeon")


def _child_read(handle, q):
    from trainer_ref import weight_sync as ws

    views, hdr = ws.mapped(handle)
    q.put(({k: ws.tensor_fingerprint(v) for k, v in views.items()}, int(hdr[0])))


def _child_hold_shared_lock(path, held, release):
    import fcntl
    import os

    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    held.set()
    release.wait(10)
    os.close(fd)


def test_another_process_maps_the_staged_tensors_and_its_read_lock_holds_writers_off():
    import threading
    import time

    m = _model()
    d = weight_sync.dump_weights(m, 3, layout=LAYOUT)
    buf = weight_sync.StagingBuffer(prefix="rlobs-test-xproc")
    ctx = mp.get_context("spawn")
    try:
        buf.write(d.state, 3)
        q = ctx.Queue()
        p = ctx.Process(target=_child_read, args=(buf.handle(), q))
        p.start()
        fps, seq = q.get(timeout=120)
        p.join(30)
        assert fps == {k: weight_sync.tensor_fingerprint(v) for k, v in d.state.items()} and seq == buf.seq
        # a reader in another process holds the shared flock: the writer waits for it
        held, release = ctx.Event(), ctx.Event()
        p = ctx.Process(target=_child_hold_shared_lock, args=(buf.path, held, release))
        p.start()
        assert held.wait(120)
        threading.Timer(0.3, release.set).start()
        t0 = time.perf_counter()
        buf.write(d.state, 4)
        assert time.perf_counter() - t0 >= 0.2 and buf.last_lock_wait_s >= 0.2
        p.join(30)
    finally:
        buf.close()


def test_object_store_fallback_lands_the_same_bytes_in_a_local_buffer():
    import ray

    m = _model()
    d = weight_sync.dump_weights(m, 5, layout=LAYOUT)
    src, dst = weight_sync.StagingBuffer(prefix="rlobs-test-src"), weight_sync.StagingBuffer(prefix="rlobs-test-dst")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, object_store_memory=80 << 20)
    try:
        src.write(d.state, 5)
        tr, _ = weight_sync.transfer(src, "object_store")
        assert tr["path"] == "object_store" and isinstance(tr["ref"], ray.ObjectRef)
        handle, _ = weight_sync.receive(tr, dst)
        assert handle["path"] == dst.path != src.path and handle["version"] == 5
        views, _ = weight_sync.mapped(handle)
        assert all(torch.equal(views[k], v) for k, v in d.state.items())
        assert weight_sync.handle_nbytes(handle) == d.nbytes
    finally:
        src.close()
        dst.close()
        if started:
            ray.shutdown()


def test_gpu_buckets_never_split_a_tensor_and_ipc_handles_travel_as_plain_values():
    entries = [("a", "float32", [10], 40), ("b", "float32", [300], 1200), ("c", "bfloat16", [2000], 4000)]
    plan = gpu_sync.plan_buckets(entries, bucket_bytes=2048)
    assert [[e[0] for e in b["entries"]] for b in plan] == [["a", "b"], ["c"]]
    assert plan[0]["entries"][1][3] == 256 and plan[0]["nbytes"] == 256 + 1200
    bucket = torch.arange(plan[0]["nbytes"], dtype=torch.int32).to(torch.uint8)
    v = gpu_sync.bucket_views(bucket, plan[0]["entries"])
    assert v["b"].dtype == torch.float32 and v["b"].data_ptr() == bucket.data_ptr() + 256
    args = (torch.Tensor, torch.Size([4, 2]), (2, 1), 0, torch.UntypedStorage, torch.float16, 3, b"\x00h", 16, 0,
            False, b"rc", 0, b"ev", True)
    enc = gpu_sync.encode_ipc(args)
    import msgpack  # what vLLM's collective_rpc serialises arguments with

    back = gpu_sync.decode_ipc(msgpack.unpackb(msgpack.packb(enc), raw=False), device_index=1)
    assert back[0] is torch.Tensor and back[1] == torch.Size([4, 2]) and back[4] is torch.UntypedStorage
    assert back[5] is torch.float16 and back[6] == 1 and back[7] == b"\x00h" and back[2] == (2, 1)
