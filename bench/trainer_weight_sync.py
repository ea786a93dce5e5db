"""Weight sync: seconds per stage and transfer bandwidth, tiny model and (optionally) SmolLM2-135M.

    python bench/trainer_weight_sync.py [--model tiny|smollm2] [--reps 5]

Runs the five stages of ``trainer_ref.weight_sync`` against a real vLLM engine in this process
(dump -> staging write/read -> Ray object store put/get -> load via the worker extension with
fingerprint comparison -> prefix-cache reset) and reports the median of ``--reps`` syncs.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    import ray
    import torch
    from transformers import AutoModelForCausalLM
    from vllm import LLM

    from trainer_ref import model_build, weight_sync

    model_dir = str(model_build.build_tiny() if args.model == "tiny" else model_build.build_smollm2())
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=1 << 30)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    llm = LLM(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=256,
              worker_extension_cls="trainer_ref.vllm_ext.WeightSyncExtension")
    # the training run's path: the trainer adopts the engine's layout (fusions, tied lm_head) and checks it
    layout = weight_sync.EngineLayout.from_engine(model, weight_sync.engine_layout_info(llm))
    staging = weight_sync.StagingBuffer()
    rows = []
    for rep in range(args.reps):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1e-4)
        t = {}
        dump = weight_sync.dump_weights(model, rep + 1, layout=layout)
        t["dump_s"] = dump.seconds
        w_wait, w_hold = staging.write(dump)
        rd = staging.read()
        t["staging_s"] = w_wait + w_hold + rd.lock_wait_s + rd.lock_hold_s
        ref, put_s = weight_sync.transfer(rd.dump.payload)
        payload, get_s = weight_sync.receive(ref)
        t["transfer_s"] = put_s + get_s
        lr = weight_sync.load_into_engine(llm, payload, dump.fingerprints, dump.shapes)
        t["load_s"] = lr.seconds
        t0 = time.perf_counter()
        assert weight_sync.reset_cache(llm)
        t["cache_reset_s"] = time.perf_counter() - t0
        t["fingerprint_match"] = lr.match
        t["bytes"] = dump.nbytes
        rows.append(t)
        print(rep, {k: round(v, 4) if isinstance(v, float) else v for k, v in t.items()}, flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in ("dump_s", "staging_s", "transfer_s", "load_s", "cache_reset_s")}
    nbytes = rows[0]["bytes"]
    res = {"model": args.model, "bytes": nbytes, "params": sum(p.numel() for p in model.parameters()),
           "median_s": med, "end_to_end_s": sum(med.values()), "transfer_bytes_per_s": nbytes / med["transfer_s"],
           "all_fingerprints_match": all(r["fingerprint_match"] for r in rows), "reps": args.reps}
    print(json.dumps(res, indent=1))
    out = Path(args.out or f"bench/results/trainer_weight_sync_{args.model}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    ray.shutdown()


if __name__ == "__main__":
    main()
