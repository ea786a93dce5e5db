"""The GPU weight-sync paths on a real vLLM engine (skipped without CUDA): CUDA IPC handles of the
trainer's device buckets (trainer and engine on one GPU node) and an NCCL broadcast through vLLM's
stateless process group; the same five boundaries, fingerprints compared, bandwidth reported."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.heavy,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


class _Trainer:
    """What gpu_sync needs of the trainer: its device and where the engine runs."""

    def __init__(self, workers: int = 1) -> None:
        self.device = "cuda"
        self._engine_place = {"workers": workers}


@pytest.fixture(scope="module")
def engine(tiny_model):
    from vllm import LLM

    llm = LLM(model=tiny_model, dtype="float32", enforce_eager=True, max_model_len=256, gpu_memory_utilization=0.3,
              worker_extension_cls="trainer_ref.vllm_ext.WeightSyncExtension")
    yield llm
    del llm


def _trainer_model(tiny_model):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).cuda()


@pytest.mark.parametrize("path", ["cuda_ipc", "nccl"])
def test_gpu_path_loads_from_device_buckets_and_fingerprints_match(engine, tiny_model, path):
    from trainer_ref import gpu_sync, weight_sync

    model = _trainer_model(tiny_model)
    info = weight_sync.engine_layout_info(engine)
    assert info["device"].startswith("cuda")
    layout = weight_sync.EngineLayout.from_engine(model, info)
    tr = _Trainer(info["workers"])
    for version in (1, 2):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1e-3)
        dump = weight_sync.dump_weights(model, version, layout=layout, kind=weight_sync.fingerprint_kind(path))
        st = gpu_sync.stage(tr, dump, path)
        t0 = time.perf_counter()
        transport, _ = gpu_sync.send(tr, path)
        handle, _ = weight_sync.receive(transport)
        lr = weight_sync.load_into_engine(engine, handle, dump.fingerprints, dump.shapes,
                                          method=weight_sync.LOAD_METHODS[path], kind=dump.kind)
        secs = time.perf_counter() - t0
        if path == "nccl":
            tr._nccl_thread.join(60)
        assert lr.match, lr.mismatched[:5]
        assert set(lr.sources.values()) == {"param"}  # on a GPU every parameter is read back
        print(f"{path} v{version}: staging {dump.nbytes / st['seconds'] / 1e9:.2f} GB/s, "
              f"transfer+load {dump.nbytes / secs / 1e9:.2f} GB/s ({dump.nbytes} bytes)")
    if path == "cuda_ipc":  # a corrupted load is caught on the GPU path too
        handle, _ = weight_sync.receive(gpu_sync.send(tr, path)[0])
        lr = weight_sync.load_into_engine(engine, handle, dump.fingerprints, dump.shapes, kind=dump.kind,
                                          perturb={"model.norm.weight": 0.5}, method=weight_sync.LOAD_METHODS[path])
        assert lr.mismatched == ["model.norm.weight"]
