"""Weight sync: each boundary's seconds and bandwidth, as a ratio to a memcpy of the same bytes
measured in the same run, per path, for the tiny model and (``--model smollm2``) SmolLM2-135M.

    python bench/trainer_weight_sync.py [--model tiny|smollm2] [--reps 5] [--paths shm,object_store]

Runs the five stages of ``trainer_ref.weight_sync`` against a real vLLM engine started by this process
(its worker runs in vLLM's engine-core process, so the worker really maps the staging buffer from
another process): dump (stage order, fingerprints) -> staging (copy into the shared-memory buffer under
its lock) -> transfer (``shm``: the handle; ``object_store``: ray.put + ray.get + copy into this node's
buffer) -> load (``reload_weights`` from views, engine fingerprints compared) -> prefix-cache reset.
End to end runs from the end of the parameter update (the optimiser step's stand-in) to the engine
serving the new weights (a greedy generate returns). The memcpy reference is ``np.copyto`` between two
preallocated buffers of the dump's size, measured (best of 2) in every repetition right before its
sync, so a boundary and its reference see the same load on a shared machine; a boundary's ratio is the
median over repetitions of memcpy seconds / boundary seconds. Medians of ``--reps``.
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
    """``np.copyto`` between two preallocated (touched) buffers of ``nbytes``: the reference."""

    def __init__(self, nbytes: int) -> None:
        import numpy as np

        self.src = np.ones(nbytes, dtype=np.uint8)
        self.dst = np.zeros_like(self.src)

    def seconds(self, reps: int = 2) -> float:
        import numpy as np

        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            np.copyto(self.dst, self.src)
            best = min(best, time.perf_counter() - t0)
        return best


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
                 "paths": {}, "cpus": os.cpu_count()}
    for path in paths:
        rows = []
        mem = Memcpy(weight_sync.dump_weights(model, 0, layout=layout).nbytes)
        staging.write(weight_sync.dump_weights(model, 0, layout=layout).state, 0)  # lay out the buffer once
        for rep in range(args.reps):
            mem_s = mem.seconds()
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
            t["fingerprint_match"], t["torn"] = lr.match, lr.torn
            t["bytes"], t["memcpy"] = dump.nbytes, mem_s
            rows.append(t)
            print(path, rep, {k: round(v, 4) if isinstance(v, float) else v for k, v in t.items()}, flush=True)
        nbytes = rows[0]["bytes"]
        med = {k: statistics.median(r[k] for r in rows) for k in (*STAGES, "engine_reload", "end_to_end")}
        out["bytes"] = nbytes
        mem_bps = nbytes / statistics.median(r["memcpy"] for r in rows)
        out["paths"][path] = {
            "memcpy_bytes_per_s": mem_bps,
            "median_s": med,
            "bandwidth_bytes_per_s": {k: nbytes / med[k] for k in STAGES if k != "cache_reset" and med[k] > 0},
            "ratio_to_memcpy": {k: round(statistics.median(r["memcpy"] / max(r[k], 1e-9) for r in rows), 3)
                                for k in STAGES if k != "cache_reset"},
            "end_to_end_s": med["end_to_end"],
            "all_fingerprints_match": all(r["fingerprint_match"] for r in rows),
            "torn_reads": sum(bool(r["torn"]) for r in rows),
        }
        print(path, json.dumps(out["paths"][path], indent=1), flush=True)
    dest = Path(args.out or f"bench/results/trainer_weight_sync_{args.model}.json")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1))
    staging.close()
    local.close()
    if ray.is_initialized():
        ray.shutdown()


if __name__ == "__main__":
    main()
