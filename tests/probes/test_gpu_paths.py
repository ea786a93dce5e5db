"""CUDA code paths of the probes (skipped without a GPU): device tensors are fingerprinted and measured
like host tensors, and the load memory high-water mark comes from the CUDA allocator."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_device_tensors_fingerprint_like_host_tensors():
    from probes.weight_sync import tensor_fingerprint

    a = torch.randn(64, 64).to(torch.bfloat16)
    assert tensor_fingerprint(a.cuda()) == tensor_fingerprint(a)


def test_device_kind_is_computed_on_the_gpu_and_equals_the_cpus():
    """The GPU weight-sync paths' fingerprint kind: the same bytes give the same fingerprint on the GPU and on the
    CPU (integer sums mod 2^64 do not depend on the reduction order), across blocks; a change is seen."""
    import probes.fingerprint as fp
    from probes.weight_sync import tensor_fingerprint

    g = torch.Generator().manual_seed(1)
    a = torch.randn(3 * fp.PERIOD + 5, generator=g).to(torch.bfloat16)  # 1.5 blocks of words, odd tail
    f = tensor_fingerprint(a.cuda(), kind="device")
    assert f == tensor_fingerprint(a, kind="device")
    parts = [a[:1000].cuda(), a[1000:].cuda()]
    assert fp.device_fingerprint(parts) == f
    b = a.cuda()
    b.view(torch.int16)[-1] += 1
    assert tensor_fingerprint(b, kind="device") != f


def test_load_high_water_mark_comes_from_the_cuda_allocator():
    from probes.weight_sync import WeightSyncProbe

    probe = WeightSyncProbe(required=())
    with probe.sync(1) as s:
        with s.load():
            x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # 64 MiB
            del x
    assert s.results["load"]["mem_hwm_bytes"] >= 64 << 20
    assert s.results["load"]["mem_hwm_bytes"] == torch.cuda.max_memory_allocated()


def test_parity_and_importance_stats_accept_cuda_tensors():
    from probes.parity import logprob_parity
    from probes.staleness import importance_stats

    g = torch.full((2, 3), -1.0, device="cuda")
    t = g + 0.01
    assert logprob_parity(g, t).mean_abs_dlogp == pytest.approx(0.01, rel=1e-5)
    assert importance_stats(g, t).tokens == 6
