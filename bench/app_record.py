"""A large, realistic run record for the app benchmark: 1M samples written through the real segment writer.

    python -m bench.app_record OUT_DIR [--samples 1000000]

Per sample: one ``rollout``, one ``grader_call`` and two ``ledger`` transitions (generated, consumed);
per step (256 samples): ``train_step``, ``advantage``, ``staleness``, ``parity``, ``throughput`` and the
six ``weight_sync`` boundary events of the next version. Columns are built as vectorised pyarrow arrays
(like ``bench/core.py: make_big_record``) so 1M samples take seconds, not minutes. A grad-norm spike
and a burst of grader timeouts are planted so that the doctor has findings to rank.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

PER_STEP = 256
GROUP = 8
T_BASE = 1_790_000_000_000_000_000
STEP_NS = 2_000_000_000  # two seconds of wall time per step


def _writer(path: Path, kind: str, process: str) -> Any:
    from rlobs.store import SegmentWriter

    return SegmentWriter(path / "events" / kind, kind, process, max_bytes=256 << 20)


def _batch(kind: str, n: int, cols: dict[str, Any], process: str, component: str) -> Any:
    import pyarrow as pa

    from rlobs.schema import arrow_schema

    schema = arrow_schema(kind)
    cols = {"run_id": pa.repeat(pa.scalar("bench-app", pa.string()), n),
            "process": pa.repeat(pa.scalar(process, pa.string()), n),
            "component": pa.repeat(pa.scalar(component, pa.string()), n),
            "rank": pa.repeat(pa.scalar(0, pa.int32()), n), **cols}
    arrays = []
    for f in schema:
        value = cols.get(f.name)
        arrays.append(pa.nulls(n, f.type) if value is None else pa.array(value, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _ids(prefix: str, idx: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(pa.scalar(prefix), pc.cast(pa.array(idx), pa.string()), "")


def make_app_record(path: Path, samples: int = 1_000_000, chunk: int = 250_000) -> dict[str, Any]:
    """Write the record; return what was written (counts, seconds)."""
    import numpy as np
    import pyarrow as pa

    from rlobs.store import ensure_manifest

    t0 = time.perf_counter()
    steps = samples // PER_STEP
    ensure_manifest(path, name="bench-app", config={"mode": "separate_async", "max_staleness": 4,
                                                    "group_size": GROUP, "samples_per_step": PER_STEP},
                    hashes={"tokenizer": "tok-1", "chat_template": "tpl-1", "sampling": "smp-1"})
    rng = np.random.default_rng(0)
    gen_p, grd_p, tr_p = "generator-r0-bench", "grader-r0-bench", "trainer-r0-bench"
    w_roll, w_grade = _writer(path, "rollout", gen_p), _writer(path, "grader_call", grd_p)
    w_led_g, w_led_c = _writer(path, "ledger", gen_p), _writer(path, "ledger", tr_p)
    done = 0
    while done < samples:
        n = min(chunk, samples - done)
        idx = np.arange(done, done + n)
        step = idx // PER_STEP
        ts = T_BASE + step * STEP_NS + (idx % PER_STEP) * (STEP_NS // PER_STEP)
        stale = rng.integers(0, 4, n)
        tokens = np.minimum(rng.lognormal(4.0, 0.8, n), 512).astype("int32")
        sid, gid = _ids("s", idx), _ids("g", idx // GROUP)
        common = {"ts_ns": ts, "mono_ns": ts - T_BASE, "step": step, "policy_version": step}
        w_roll.write(_batch("rollout", n, {**common, "sample_id": sid, "group_id": gid,
                                           "prompt_id": _ids("p", idx // GROUP), "dispatch_version": step - stale,
                                           "min_token_version": step - stale, "max_token_version": step - stale,
                                           "prompt_tokens": np.full(n, 64, "int32"), "completion_tokens": tokens,
                                           "finish_reason": np.where(tokens >= 512, "length", "stop"),
                                           "gen_seconds": rng.lognormal(0.0, 0.5, n)}, gen_p, "generator"))
        latency = rng.lognormal(-3.0, 0.4, n)
        timeout = (step >= steps - 40) & (rng.random(n) < 0.2)  # a grader burst at the end of the run
        latency = np.where(timeout, 30.0, latency)
        reward = np.where(timeout, np.nan, (rng.random(n) < 0.4).astype("float64"))
        w_grade.write(_batch("grader_call", n, {**common, "sample_id": sid, "grader_kind": np.where(idx % 4 == 0, "code", "rule"),
                                                "queue_wait_s": rng.exponential(0.01, n), "latency_s": latency,
                                                "outcome": np.where(timeout, "timeout", "ok"),
                                                "reward": pa.array(reward, from_pandas=True)}, grd_p, "grader"))
        w_led_g.write(_batch("ledger", n, {**common, "sample_id": sid, "group_id": gid,
                                           "state": np.full(n, "generated"), "tokens": tokens}, gen_p, "generator"))
        w_led_c.write(_batch("ledger", n, {**common, "ts_ns": ts + STEP_NS // 2, "sample_id": sid, "group_id": gid,
                                           "state": np.full(n, "consumed"), "tokens": tokens, "staleness": stale,
                                           "age_s": rng.uniform(0.5, 4.0, n)}, tr_p, "trainer"))
        done += n
    for w in (w_roll, w_grade, w_led_g, w_led_c):
        w.close()
    _per_step(path, steps, rng)
    return {"samples": samples, "steps": steps, "events": samples * 4 + steps * 11,
            "seconds": round(time.perf_counter() - t0, 2)}


def _per_step(path: Path, steps: int, rng: Any) -> None:
    import numpy as np

    step = np.arange(steps)
    ts = T_BASE + step * STEP_NS + STEP_NS - 1
    common = {"ts_ns": ts, "mono_ns": ts - T_BASE, "step": step, "policy_version": step}
    gn = rng.lognormal(0.0, 0.15, steps)
    gn[steps // 2] *= 40  # one grad-norm spike
    tr = "trainer-r0-bench"
    batches = [
        ("train_step", tr, "trainer", {"loss": 0.5 + rng.normal(0, 0.05, steps), "grad_norm": gn,
                                       "grad_norm_clipped": np.minimum(gn, 1.0), "clipped": gn > 1.0,
                                       "nonfinite": np.zeros(steps, bool), "lr": np.full(steps, 1e-6),
                                       "samples": np.full(steps, PER_STEP), "tokens": np.full(steps, PER_STEP * 60),
                                       "step_seconds": rng.uniform(1.6, 1.9, steps), "data_wait_s": rng.uniform(0.05, 0.1, steps),
                                       "reward_wait_s": rng.uniform(0.01, 0.02, steps),
                                       "reward_mean": rng.uniform(0.3, 0.5, steps), "reward_std": rng.uniform(0.4, 0.5, steps)}),
        ("advantage", tr, "trainer", {"groups": np.full(steps, PER_STEP // GROUP), "zero_std_groups": rng.integers(0, 4, steps),
                                      "near_zero_std_groups": np.zeros(steps, "int64"), "near_zero_threshold": np.full(steps, 1e-3),
                                      "zero_std_ratio": rng.uniform(0, 0.1, steps), "near_zero_std_ratio": np.zeros(steps),
                                      "max_abs_advantage": rng.uniform(1.5, 2.5, steps), "denom_min": rng.uniform(0.2, 0.4, steps),
                                      "denom_p50": rng.uniform(0.45, 0.5, steps), "denom_max": np.full(steps, 0.5),
                                      "nonfinite_denominators": np.zeros(steps, "int64"),
                                      "token_denominator": np.full(steps, PER_STEP * 60.0), "ranks_agree": np.ones(steps, bool)}),
        ("staleness", tr, "trainer", {"samples": np.full(steps, PER_STEP), "max_staleness": np.full(steps, 3),
                                      "mean_staleness": rng.uniform(1.4, 1.6, steps), "histogram": [json.dumps({"0": 64, "1": 64, "2": 64, "3": 64})] * steps,
                                      "is_ratio_mean": np.ones(steps), "is_ratio_max": np.full(steps, 1.3),
                                      "is_clipped_ratio": np.zeros(steps), "ess_ratio": np.full(steps, 0.97)}),
        ("parity", tr, "trainer", {"tokens": np.full(steps, PER_STEP * 60), "mean_abs_dlogp": rng.uniform(0.0005, 0.0015, steps),
                                   "max_abs_dlogp": rng.uniform(0.004, 0.012, steps), "kl_k3": np.full(steps, 1e-6),
                                   "first_after_sync": np.ones(steps, bool), "hashes_match": np.ones(steps, bool)}),
        ("throughput", "generator-r0-bench", "generator", {"window_s": np.full(steps, 2.0), "samples": np.full(steps, PER_STEP),
                                                           "samples_per_s": np.full(steps, PER_STEP / 2.0),
                                                           "tokens_per_s": rng.uniform(7000, 8000, steps),
                                                           "effective_samples_per_s": np.full(steps, PER_STEP / 2.0 * 0.95),
                                                           "idle_ratio": rng.uniform(0.05, 0.15, steps)}),
        ("heartbeat", tr, "trainer", {"phase": ["train"] * steps}),
    ]
    for kind, proc, comp, cols in batches:
        w = _writer(path, kind, proc)
        w.write(_batch(kind, steps, {**common, **cols}, proc, comp))
        w.close()
    bounds = ["dump", "staging", "transfer", "load", "cache_reset", "end_to_end"]
    durs = {"dump": 0.01, "staging": 0.002, "transfer": 0.02, "load": 0.02, "cache_reset": 0.001, "end_to_end": 0.06}
    w = _writer(path, "weight_sync", "generator-r0-bench")
    for i, b in enumerate(bounds):
        offset = sum(durs[x] for x in bounds[:i]) if b != "end_to_end" else 0.0
        start = ts + int(offset * 1e9)
        w.write(_batch("weight_sync", steps, {**common, "ts_ns": start + int(durs[b] * 1e9), "version": step + 1,
                                               "boundary": [b] * steps, "start_ns": start, "duration_s": np.full(steps, durs[b]),
                                               "bytes": np.full(steps, 4_000_000), "outcome": ["ok"] * steps,
                                               "reset_requested": np.ones(steps, bool) if b == "cache_reset" else None,
                                               "reset_confirmed": np.ones(steps, bool) if b == "cache_reset" else None,
                                               "fingerprint_match": np.ones(steps, bool) if b == "load" else None},
                            "generator-r0-bench", "generator"))
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--samples", type=int, default=1_000_000)
    args = ap.parse_args()
    print(json.dumps(make_app_record(args.out, args.samples)))


if __name__ == "__main__":
    main()
