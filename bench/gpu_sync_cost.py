"""What the ``cuda_ipc`` weight-sync path and its verification cost on a GPU, per sync, for Llama-shaped models.

    python -m bench.gpu_sync_cost [--models smollm2-135m llama-1.5b llama-8b] [--repeats 3]

Needs a CUDA GPU (no vLLM: the engine's side runs in a second process that does what ``GpuSyncMixin.rlobs_load_ipc``
does up to ``reload_weights``). The weights are random bf16 tensors of the real shapes (trainer layout: q/k/v and
gate/up apart; the engine fuses them, vLLM's ``LlamaForCausalLM.packed_modules_mapping``). Per model, the median of
``--repeats`` syncs after one warm-up, each stage timed with the code trainer_ref runs:

* ``fingerprint_state`` (stage 1's per-tensor fingerprints) of both kinds: ``bytes`` (every byte to the host,
  xxh3: what the GPU paths used before 4 Dec 2026) and ``device`` (a checksum computed on the GPU, what they use
  now, ``weight_sync.fingerprint_kind``), and ``bytes`` sampled (``max_bytes`` 64 KiB per tensor) for comparison;
* ``gpu_sync.stage`` (stage 2: one device copy into the persistent ``uint8`` buckets) and ``gpu_sync.send``
  (stage 3a: the buckets' IPC handles);
* in the engine's process: opening the handles (``rebuild_cuda_tensor``), copying the views into fused
  destination tensors (a stand-in for ``reload_weights``' copy, which this machine cannot run without vLLM), and the
  engine's read-back fingerprints (``rlobs_fingerprints``: every parameter, full) of both kinds, each checked
  against the trainer's.

Against a plain device-to-device copy of the same bytes in the same run (the ceiling of stage 2). Saved to
``bench/results/gpu_sync_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "gpu_sync_cost.json"
PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
SHAPES = {  # hidden, layers, intermediate, heads, kv heads, head dim, vocab, tied (the public configs' shapes)
    "smollm2-135m": (576, 30, 1536, 9, 3, 64, 49152, True),
    "llama-1.5b": (1536, 28, 8960, 12, 2, 128, 151936, True),  # Qwen2.5-1.5B's shape without its q/k/v biases
    "llama-8b": (4096, 32, 14336, 32, 8, 128, 128256, False),  # Llama-3-8B's shape
}
SAMPLED_BYTES = 64 << 10


def llama_state(name: str, device: str) -> dict[str, Any]:
    import torch

    h, n, inter, heads, kv, hd, vocab, tied = SHAPES[name]
    g = torch.Generator(device=device).manual_seed(0)

    def t(*shape: int) -> Any:
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(torch.bfloat16)

    state = {"model.embed_tokens.weight": t(vocab, h), "model.norm.weight": t(h)}
    for i in range(n):
        p = f"model.layers.{i}."
        state.update({p + "self_attn.q_proj.weight": t(heads * hd, h), p + "self_attn.k_proj.weight": t(kv * hd, h),
                      p + "self_attn.v_proj.weight": t(kv * hd, h), p + "self_attn.o_proj.weight": t(h, heads * hd),
                      p + "mlp.gate_proj.weight": t(inter, h), p + "mlp.up_proj.weight": t(inter, h),
                      p + "mlp.down_proj.weight": t(h, inter), p + "input_layernorm.weight": t(h),
                      p + "post_attention_layernorm.weight": t(h)})
    if not tied:
        state["lm_head.weight"] = t(vocab, h)
    return state


class _Trainer:
    device = "cuda"


def _engine(conn: Any, layout: dict[str, Any], repeats: int) -> None:
    """The engine worker's side, in its own process: open the handles, load (copy) fused, fingerprint back."""
    import torch

    from probes.fingerprint import tensor_fingerprint
    from trainer_ref.gpu_sync import open_ipc
    from trainer_ref.weight_sync import EngineLayout, fused_views

    lay = EngineLayout(layout["packed"], layout["aliases"])
    dest: dict[str, Any] = {}
    try:
        for _ in range(repeats + 1):
            handle = conn.recv()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            state = open_ipc(handle)
            t1 = time.perf_counter()
            parts = fused_views(state, lay)
            for k, v in parts.items():
                if k not in dest:
                    rows = sum(x.shape[0] for x in v)
                    dest[k] = torch.empty((rows, *v[0].shape[1:]), dtype=v[0].dtype, device="cuda")
                torch.cat(v, 0, out=dest[k])
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            fps = {k: tensor_fingerprint(x) for k, x in dest.items()}
            t3 = time.perf_counter()
            dfps = {k: tensor_fingerprint(x, kind="device") for k, x in dest.items()}
            torch.cuda.synchronize()
            t4 = time.perf_counter()
            conn.send({"open_s": t1 - t0, "copy_s": t2 - t1, "fingerprint_s": t3 - t2, "fingerprints": fps,
                       "device_fingerprint_s": t4 - t3, "device_fingerprints": dfps})
    except Exception as e:  # noqa: BLE001 - reported to the parent
        conn.send({"error": repr(e)})


def measure(name: str, repeats: int) -> dict[str, Any]:
    import torch

    from trainer_ref import gpu_sync
    from trainer_ref.weight_sync import Dump, EngineLayout, fingerprint_state, stage_order

    layout = EngineLayout({k: list(v) for k, v in PACKED.items()}, {})
    state = stage_order(llama_state(name, "cuda"), layout)
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    tr = _Trainer()
    ctx = torch.multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_engine, args=(child, layout.to_dict(), repeats))
    proc.start()
    rows: dict[str, list[float]] = {k: [] for k in ("fingerprint_s", "fingerprint_sampled_s", "device_fingerprint_s",
                                                    "stage_s", "send_s", "d2d_copy_s", "open_s", "copy_s",
                                                    "engine_fingerprint_s", "engine_device_fingerprint_s")}
    flat = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    try:
        for k in range(repeats + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fps, shapes = fingerprint_state(state, layout)
            t1 = time.perf_counter()
            fingerprint_state_sampled = {n: _sampled(v) for n, v in state.items()}
            t2 = time.perf_counter()
            dfps, _ = fingerprint_state(state, layout, "device")
            torch.cuda.synchronize()
            t2d = time.perf_counter()
            dump = Dump(k + 1, state, dfps, sorted(state), t2d - t2, shapes, "device")
            st = gpu_sync.stage(tr, dump, "cuda_ipc")
            transport, send_s = gpu_sync.send(tr, "cuda_ipc")
            torch.cuda.synchronize()
            t3 = time.perf_counter()
            off = 0
            for v in state.values():  # the ceiling: the same bytes copied device to device, tensor by tensor
                n = v.numel() * v.element_size()
                flat[off:off + n].copy_(v.reshape(-1).view(torch.uint8), non_blocking=True)
                off += n
            torch.cuda.synchronize()
            t4 = time.perf_counter()
            parent.send(transport["handle"])
            got = parent.recv()
            if "error" in got:
                raise RuntimeError(f"engine process: {got['error']}")
            for mine, theirs in ((fps, got["fingerprints"]), (dfps, got["device_fingerprints"])):
                if theirs != mine:
                    bad = sorted(n for n in mine if theirs.get(n) != mine[n])
                    raise AssertionError(f"engine fingerprints differ: {bad[:5]}")
            if k == 0:
                continue  # warm-up (allocations, the buckets, the child's destinations)
            for key, val in (("fingerprint_s", t1 - t0), ("fingerprint_sampled_s", t2 - t1),
                             ("device_fingerprint_s", t2d - t2), ("stage_s", st["seconds"]),
                             ("send_s", send_s), ("d2d_copy_s", t4 - t3), ("open_s", got["open_s"]),
                             ("copy_s", got["copy_s"]), ("engine_fingerprint_s", got["fingerprint_s"]),
                             ("engine_device_fingerprint_s", got["device_fingerprint_s"])):
                rows[key].append(val)
            del fingerprint_state_sampled
    finally:
        proc.join(60)
        if proc.is_alive():
            proc.kill()
    med = {k: statistics.median(v) for k, v in rows.items()}
    gbs = {k.removesuffix("_s") + "_gb_per_s": round(nbytes / v / 1e9, 2) for k, v in med.items() if v > 0}
    return {"model": name, "bytes": nbytes, "tensors": len(state), "buckets": len(tr._gpu_stage["plan"]),
            "repeats": repeats, **{k: round(v, 4) for k, v in med.items()}, **gbs,
            "stage_over_d2d": round(med["stage_s"] / med["d2d_copy_s"], 2),
            "verify_share_of_sync": _share(med, "fingerprint_s", "engine_fingerprint_s"),
            "device_verify_share_of_sync": _share(med, "device_fingerprint_s", "engine_device_fingerprint_s"),
            "bytes_over_device_fingerprint": round(
                (med["fingerprint_s"] + med["engine_fingerprint_s"])
                / (med["device_fingerprint_s"] + med["engine_device_fingerprint_s"]), 1),
            "samples": {k: [round(x, 4) for x in v] for k, v in rows.items()}}


def _share(med: dict[str, float], trainer: str, engine: str) -> float:
    """The share of one sync (stages 1-4) that its verification (fingerprints on both sides) takes."""
    verify = med[trainer] + med[engine]
    return round(verify / (verify + med["stage_s"] + med["send_s"] + med["open_s"] + med["copy_s"]), 3)


def _sampled(t: Any) -> str:
    from probes.fingerprint import tensor_fingerprint

    return tensor_fingerprint(t, max_bytes=SAMPLED_BYTES)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu_sync_cost needs a CUDA GPU; nothing measured")
        return 2
    rows = []
    for m in args.models:
        r = measure(m, args.repeats)
        rows.append(r)
        print(f"{m}: {r['bytes'] / 1e9:.2f} GB in {r['buckets']} buckets | fingerprint (full) "
              f"{r['fingerprint_s']:.3f} s ({r['fingerprint_gb_per_s']} GB/s), sampled "
              f"{r['fingerprint_sampled_s']:.3f} s | stage {r['stage_s']:.4f} s "
              f"({r['stage_gb_per_s']} GB/s; d2d copy {r['d2d_copy_gb_per_s']} GB/s, ratio {r['stage_over_d2d']}) | "
              f"send {r['send_s'] * 1e3:.1f} ms | engine: open {r['open_s'] * 1e3:.1f} ms, copy {r['copy_s']:.4f} s "
              f"({r['copy_gb_per_s']} GB/s), fingerprint {r['engine_fingerprint_s']:.3f} s | "
              f"verification {r['verify_share_of_sync']:.0%} of the sync | device kind: trainer "
              f"{r['device_fingerprint_s']:.4f} s ({r['device_fingerprint_gb_per_s']} GB/s), engine "
              f"{r['engine_device_fingerprint_s']:.4f} s, {r['device_verify_share_of_sync']:.0%} of the sync, "
              f"{r['bytes_over_device_fingerprint']}x faster than bytes")
    out = {"date": time.strftime("%Y-%m-%d"), "machine": {"gpu": torch.cuda.get_device_name(), "cpus": os.cpu_count(),
                                                          "python": platform.python_version(),
                                                          "torch": torch.__version__}, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
