"""Weight sync: each boundary's seconds and bandwidth, as a ratio to a memcpy of the same bytes
measured in the same run, per path, for the tiny model and (``--model smollm2``) SmolLM2-135M.

    python bench/trainer_weight_sync.py [--model tiny|smollm2] [--reps 5] [--paths shm,object_store]

Runs the five stages of ``trainer_ref.weight_sync`` against a real vLLM engine started by this process
(its worker runs in vLLM's engine-core process, so the worker really maps the staging buffer from
another process): dump (stage order, fingerprints) -> staging (copy into the shared-memory buffer under
its lock) -> transfer (``shm``: the handle; ``object_store``: ray.put + ray.get + copy into this node's
buffer) -> load (``reload_weights`` from views, engine fingerprints compared) -> prefix-cache reset.
End to end runs from the end of the parameter update (the optimiser step's stand-in) to the engine
serving the new weights (a greedy generate returns).

The memcpy reference: one ``np.copyto`` (glibc ``memcpy``, single thread) of exactly the dump's bytes
between two anonymous buffers allocated and written once at start (no page faults in the timed copy),
timed once right before each sync and once right after it; the repetition's reference is the mean of
the two, so a boundary and its reference see the same load on a shared machine, and neither side gets
a best-of-N. A boundary's ratio is the median over repetitions of reference seconds / boundary seconds.
``torch.Tensor.copy_`` of the same bytes is recorded beside it for information only (it runs at about
half of ``memcpy`` here, so it would flatter the ratios). The model's tensors are flattened into one
buffer by the first dump, before the timed repetitions (``flatten_s``; ``weight_sync.flatten_parameters``).
On ``shm`` the transfer moves no weight bytes (the engine maps the buffer: only the handle is sent);
the bytes cross into the engine in the load. Medians of ``--reps``.
The GPU paths (cuda_ipc, nccl) need a CUDA machine: ``tests/trainer_ref/test_gpu_sync.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

STAGES = ("dump", "staging", "transfer", "load", "cache_reset")


class Memcpy:
    """The reference: ``np.copyto`` (glibc memcpy) of ``nbytes`` between two preallocated, written
    buffers; ``torch_seconds``: ``Tensor.copy_`` of the same bytes (for information)."""

    def __init__(self, nbytes: int) -> None:
        import numpy as np
        import torch

        self.src = np.ones(nbytes, dtype=np.uint8)
        self.dst = np.zeros_like(self.src)
        self.tsrc, self.tdst = torch.ones(nbytes, dtype=torch.uint8), torch.zeros(nbytes, dtype=torch.uint8)

    def seconds(self) -> float:
        import numpy as np

        t0 = time.perf_counter()
        np.copyto(self.dst, self.src)
        return time.perf_counter() - t0

    def torch_seconds(self) -> float:
        t0 = time.perf_counter()
        self.tdst.copy_(self.tsrc)
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--paths", default="shm,object_store")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    import ray
    import torch
    from transformers import AutoModelForCausalLM
    from vllm import LLM, SamplingParams

    from trainer_ref import model_build, weight_sync

    model_dir = str(model_build.build_tiny() if args.model == "tiny" else model_build.build_smollm2())
    paths = [p for p in args.paths.split(",") if p]
    if "object_store" in paths:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=1 << 30)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    llm = LLM(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=256,
              worker_extension_cls="trainer_ref.vllm_ext.WeightSyncExtension")
    greedy = SamplingParams(temperature=0.0, max_tokens=1)
    layout = weight_sync.EngineLayout.from_engine(model, weight_sync.engine_layout_info(llm))
    staging, local = weight_sync.StagingBuffer(prefix="rlobs-bench-trainer"), weight_sync.StagingBuffer(prefix="rlobs-bench-local")
    out: dict = {"model": args.model, "params": sum(p.numel() for p in model.parameters()), "reps": args.reps,
                 "paths": {}, "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()[0],
                 "memcpy_reference": "np.copyto (glibc memcpy, 1 thread) of the dump's bytes between two "
                                     "pre-written anonymous buffers, once before and once after each sync, mean"}
    first = weight_sync.dump_weights(model, 0, layout=layout)  # flattens the model's tensors (once)
    out["flatten_s"] = first.seconds
    mem = Memcpy(first.nbytes)
    for path in paths:
        rows = []
        staging.write(weight_sync.dump_weights(model, 0, layout=layout).state, 0)  # lay out the buffer once
        for rep in range(args.reps):
            torch_s = mem.torch_seconds()
            mem_before = mem.seconds()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1e-4)
            t_step = time.perf_counter()  # the optimiser step's end
            t: dict = {}
            dump = weight_sync.dump_weights(model, rep + 1, layout=layout)
            t["dump"] = dump.seconds
            t0 = time.perf_counter()
            staging.write(dump.state, rep + 1)
            t["staging"] = time.perf_counter() - t0
            transport, put_s = weight_sync.transfer(staging, path)
            handle, get_s = weight_sync.receive(transport, local)
            t["transfer"] = put_s + get_s
            lr = weight_sync.load_into_engine(llm, handle, dump.fingerprints, dump.shapes)
            t["load"], t["engine_reload"] = lr.seconds, lr.engine_s
            t0 = time.perf_counter()
            assert weight_sync.reset_cache(llm)
            t["cache_reset"] = time.perf_counter() - t0
            llm.generate([[1, 2, 3]], greedy, use_tqdm=False)  # serving the new version
            t["end_to_end"] = time.perf_counter() - t_step
            mem_after = mem.seconds()
            t["fingerprint_match"], t["torn"] = lr.match, lr.torn
            t["bytes"], t["memcpy"], t["memcpy_pair"], t["torch_copy"] = \
                dump.nbytes, (mem_before + mem_after) / 2, [mem_before, mem_after], torch_s
            t["loadavg"] = os.getloadavg()[0]
            rows.append(t)
            print(path, rep, {k: round(v, 4) if isinstance(v, float) else v for k, v in t.items()}, flush=True)
        nbytes = rows[0]["bytes"]
        med = {k: statistics.median(r[k] for r in rows) for k in (*STAGES, "engine_reload", "end_to_end")}
        out["bytes"] = nbytes
        mem_bps = nbytes / statistics.median(r["memcpy"] for r in rows)
        out["paths"][path] = {
            "memcpy_bytes_per_s": mem_bps,
            "torch_copy_bytes_per_s": nbytes / statistics.median(r["torch_copy"] for r in rows),
            "transfer_moves_weight_bytes": path != "shm",
            "median_s": med,
            "bandwidth_bytes_per_s": {k: nbytes / med[k] for k in STAGES if k != "cache_reset" and med[k] > 0},
            "ratio_to_memcpy": {k: round(statistics.median(r["memcpy"] / max(r[k], 1e-9) for r in rows), 3)
                                for k in STAGES if k != "cache_reset"},
            "end_to_end_s": med["end_to_end"],
            "all_fingerprints_match": all(r["fingerprint_match"] for r in rows),
            "torn_reads": sum(bool(r["torn"]) for r in rows),
        }
        print(path, json.dumps(out["paths"][path], indent=1), flush=True)
    out["loadavg_end"] = os.getloadavg()[0]
    dest = Path(args.out or f"bench/results/trainer_weight_sync_{args.model}.json")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1))
    staging.close()
    local.close()
    if ray.is_initialized():
        ray.shutdown()


if __name__ == "__main__":
    main()
