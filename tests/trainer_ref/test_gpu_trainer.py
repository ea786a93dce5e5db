"""The trainer on a CUDA GPU without vLLM (skipped without CUDA): real GRPO steps with the probes recording,
the same numbers as the CPU within float32 tolerance, and the ``cuda_ipc`` sender's device buckets opened
from another process (what vLLM's worker does in ``GpuSyncMixin.rlobs_load_ipc``) with every fingerprint
matching the dump's (the ``device`` kind on both sides, computed on the GPU). ``test_gpu_sync.py`` covers the
load into a real vLLM engine where a CUDA vLLM is installed."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# vLLM's LlamaForCausalLM.packed_modules_mapping: the engine's fused layout, which the dump and the buckets follow
LLAMA_PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def _trainer(tiny_model: str, run_dir, **extra):
    from trainer_ref.config import Config
    from trainer_ref.trainer import Trainer
    from trainer_ref.weight_sync import EngineLayout, tied_aliases

    cfg = {**Config(run_dir=str(run_dir), model="tiny", progress=False, groups_per_step=4, group_size=8,
                    max_tokens=24).to_dict(), **extra}  # e.g. weight_sync_path (the config leaves it to placement)
    tr = Trainer(tiny_model, cfg, str(run_dir))
    tr.layout = EngineLayout({k: list(v) for k, v in LLAMA_PACKED.items()}, tied_aliases(tr.model))
    return tr


def _batch(tr, step: int):
    from bench.trainer_step_cost import batch

    return batch(tr.tok, tr.cfg["task"], 4, 8, 24, step)


def test_steps_on_cuda_match_the_cpu_and_are_recorded(tiny_model, tmp_path):
    import rlobs

    tr = _trainer(tiny_model, tmp_path / "gpu")
    assert tr.device == "cuda" and next(tr.model.parameters()).is_cuda
    cpu_model = copy.deepcopy(tr.model).to("cpu")
    groups = _batch(tr, 0)
    from trainer_ref import grpo

    s = groups[0]["samples"][:4]  # the same forward on both devices: float32 log-probs agree
    seqs = [x["prompt_ids"] + x["completion_ids"] for x in s]
    ids, mask = grpo.pad_batch(seqs, [len(x["prompt_ids"]) for x in s], tr.pad_id)
    attn = grpo.length_mask([len(x) for x in seqs], ids.shape[1])
    with torch.no_grad():
        lp_gpu, _ = grpo.token_logprobs(tr.model, ids.cuda(), tr.pad_id, attention_mask=attn.cuda())
        lp_cpu, _ = grpo.token_logprobs(cpu_model, ids, tr.pad_id, attention_mask=attn)
    m = mask.bool()
    assert torch.allclose(lp_gpu.cpu()[m], lp_cpu[m], atol=2e-4), (lp_gpu.cpu()[m] - lp_cpu[m]).abs().max()

    before = {k: v.detach().clone() for k, v in tr.model.state_dict().items()}
    outs = [tr.train_step(_batch(tr, k), k) for k in range(3)]
    for o in outs:
        assert o["grad_norm"] > 0 and not o["nonfinite"], o
        assert o["entropy"] > 0 and o["tokens"] > 0
    assert tr.version == 3
    assert any(not torch.equal(before[k], v) for k, v in tr.model.state_dict().items())  # it trained
    # trainer-vs-generator log-prob gap the step reports: the batch's random log-probs, on either device alike
    assert 0.5 < outs[0]["mean_abs_dlogp"] < 50
    assert tr.flush_telemetry()
    tr.shutdown()
    rec = rlobs.open_run(tmp_path / "gpu")
    rows = rec.sql("select step, grad_norm, entropy from train_step order by step").fetchall()
    assert [r[0] for r in rows] == [0, 1, 2]
    assert [round(r[1], 5) for r in rows] == [round(o["grad_norm"], 5) for o in outs]
    assert rec.sql("select count(*) from advantage").fetchall()[0][0] == 3


def _open_buckets(handle, layout, out) -> None:  # runs in another process, as the engine's worker would
    from probes.weight_sync import tensor_fingerprint
    from trainer_ref.gpu_sync import open_ipc
    from trainer_ref.weight_sync import EngineLayout, concat_fingerprint, fingerprint_kind, fused_views

    try:
        state = open_ipc(handle)  # what GpuSyncMixin.rlobs_load_ipc hands to reload_weights
        assert all(v.is_cuda for v in state.values())
        parts = fused_views(state, EngineLayout(layout["packed"], layout["aliases"]))  # the trainer layout, fused
        kind = fingerprint_kind("cuda_ipc")  # "device": on the GPU, both sides
        fps = {k: concat_fingerprint(v, kind) for k, v in parts.items()}  # part by part
        fused = {k: tensor_fingerprint(torch.cat(v, 0), kind=kind) for k, v in parts.items()}  # what the load builds
        torch.cuda.synchronize()
        out.put(("ok", (fps, fused, sorted(state))))
    except Exception as e:  # noqa: BLE001 - reported to the test
        out.put(("error", repr(e)))


def test_cuda_ipc_buckets_open_in_another_process_with_matching_fingerprints(tiny_model, tmp_path):
    tr = _trainer(tiny_model, tmp_path / "ipc", weight_sync_path="cuda_ipc")
    ctx = torch.multiprocessing.get_context("spawn")
    try:
        for step in range(2):
            tr.train_step(_batch(tr, step), step)
            sync = tr.sync_out()
            assert sync["path"] == "cuda_ipc" and sync["version"] == step + 1
            assert len(sync["fingerprints"]) == len(sync["shapes"])
            handle = sync["ref"][0]["handle"]
            assert handle["version"] == step + 1 and all(b["ipc"] for b in handle["buckets"])
            q = ctx.Queue()
            p = ctx.Process(target=_open_buckets, args=(handle, tr.layout.to_dict(), q))
            p.start()
            status, got = q.get(timeout=120)
            p.join(60)
            assert status == "ok", got
            fps, fused, names = got
            # the buckets hold the trainer layout (the engine fuses on load)
            assert names == sorted(k for k in tr.expected if k not in tr.layout.aliases)
            assert fps == fused == sync["fingerprints"]  # every engine-layout tensor, fused ones included
            assert any(k.endswith("qkv_proj.weight") for k in fps)
    finally:
        tr.shutdown()
