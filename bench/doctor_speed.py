"""Doctor speed and memory on a 10M-event record.

    python -m bench.doctor_speed [--events 10000000] [--keep DIR]

Builds (or reuses with --keep) a record of a long run: 10,000 steps, each with 250 rollouts, 250 grader
calls and 500 ledger transitions (generated + consumed) plus per-step train_step / advantage / staleness /
parity / weight-sync (6 boundaries) / heartbeat events, written through the real segment writer. Then runs
`rlobs doctor RUN --json` in a child process and reports wall time and peak RSS (target: <= 10 s and
<= 2 GB on this machine). Saves bench/results/doctor_speed.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rlobs.schema import arrow_schema
from rlobs.store import SegmentWriter, ensure_manifest

RESULTS = Path(__file__).parent / "results"
T0 = 1_790_000_000_000_000_000


def _batch(kind: str, n: int, cols: dict[str, Any], process: str, component: str) -> pa.RecordBatch:
    schema = arrow_schema(kind)
    base = {
        "run_id": pa.repeat(pa.scalar("bench", pa.string()), n),
        "process": pa.repeat(pa.scalar(process, pa.string()), n),
        "component": pa.repeat(pa.scalar(component, pa.string()), n),
        "rank": pa.repeat(pa.scalar(0, pa.int32()), n),
    }
    arrays = []
    for f in schema:
        v = cols.get(f.name, base.get(f.name))
        arrays.append(pa.nulls(n, f.type) if v is None else (v if isinstance(v, pa.Array) else pa.array(v, f.type)))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def build(path: Path, events: int) -> int:
    ensure_manifest(path, name="doctor-bench", config={"max_staleness": 2, "mode": "separate_async"})
    per_step_samples = 250
    steps = max(events // (4 * per_step_samples), 10)
    rng = np.random.default_rng(0)
    w = {k: SegmentWriter(path / "events" / k, k, f"{k}-bench", max_bytes=256 << 20)
         for k in ("rollout", "grader_call", "ledger", "train_step", "advantage", "staleness", "parity",
                   "weight_sync", "heartbeat")}
    total = 0
    chunk_steps = 400
    for s0 in range(0, steps, chunk_steps):
        st = np.arange(s0, min(s0 + chunk_steps, steps))
        k = len(st)
        n = k * per_step_samples
        step = np.repeat(st, per_step_samples)
        idx = np.arange(s0 * per_step_samples, s0 * per_step_samples + n)
        ts = T0 + step * 1_000_000_000 + (idx % per_step_samples) * 1000
        sid = pa.array(np.char.add("s", idx.astype(str)))
        gid = pa.array(np.char.add("g", (idx // 8).astype(str)))
        stale = rng.integers(0, 3, n)
        w["rollout"].write(_batch("rollout", n, {
            "ts_ns": ts, "mono_ns": ts - T0, "step": step, "policy_version": step, "sample_id": sid, "group_id": gid,
            "prompt_id": pa.array(np.char.add("p", (idx // 8).astype(str))), "dispatch_version": step - stale,
            "completion_tokens": rng.lognormal(4, 0.7, n).astype("int32"), "finish_reason": pa.repeat(
                pa.scalar("stop", pa.string()), n), "gen_seconds": rng.lognormal(0, 0.4, n)}, "gen-bench", "generator"))
        w["grader_call"].write(_batch("grader_call", n, {
            "ts_ns": ts + 500, "mono_ns": ts - T0, "sample_id": sid, "grader_kind": pa.repeat(pa.scalar("rule", pa.string()), n),
            "queue_wait_s": rng.exponential(0.001, n), "latency_s": rng.lognormal(-3, 0.3, n),
            "outcome": pa.repeat(pa.scalar("ok", pa.string()), n), "reward": (rng.random(n) < 0.4).astype(float)},
            "grader-bench", "grader"))
        for state, off in (("generated", 100), ("consumed", 900_000_000)):
            w["ledger"].write(_batch("ledger", n, {
                "ts_ns": ts + off, "mono_ns": ts - T0, "step": step, "sample_id": sid, "group_id": gid,
                "state": pa.repeat(pa.scalar(state, pa.string()), n), "tokens": rng.integers(10, 300, n),
                "staleness": stale if state == "consumed" else None,
                "age_s": rng.uniform(0.5, 3, n) if state == "consumed" else None}, "trainer-bench", "trainer"))
        sts = T0 + st * 1_000_000_000
        w["train_step"].write(_batch("train_step", k, {
            "ts_ns": sts, "mono_ns": sts - T0, "step": st, "policy_version": st, "loss": rng.normal(0.5, 0.05, k),
            "grad_norm": rng.lognormal(0, 0.15, k), "nonfinite": np.zeros(k, bool), "step_seconds": rng.uniform(0.9, 1.1, k),
            "data_wait_s": rng.uniform(0.05, 0.1, k), "reward_wait_s": rng.uniform(0.01, 0.02, k)},
            "trainer-bench", "trainer"))
        w["advantage"].write(_batch("advantage", k, {
            "ts_ns": sts, "mono_ns": sts - T0, "step": st, "groups": np.full(k, 32), "zero_std_groups": rng.integers(4, 12, k),
            "near_zero_std_groups": np.zeros(k, int), "zero_std_ratio": rng.uniform(0.1, 0.4, k),
            "max_abs_advantage": rng.uniform(1.5, 2.6, k), "denom_min": rng.uniform(0.2, 0.4, k),
            "nonfinite_denominators": np.zeros(k, int), "ranks_agree": np.ones(k, bool)}, "trainer-bench", "trainer"))
        w["staleness"].write(_batch("staleness", k, {
            "ts_ns": sts, "mono_ns": sts - T0, "step": st, "max_staleness": np.full(k, 2), "mean_staleness": np.ones(k)},
            "trainer-bench", "trainer"))
        w["parity"].write(_batch("parity", k, {
            "ts_ns": sts, "mono_ns": sts - T0, "step": st, "mean_abs_dlogp": rng.uniform(0.0005, 0.002, k),
            "first_after_sync": np.ones(k, bool), "hashes_match": np.ones(k, bool)}, "trainer-bench", "trainer"))
        for b in ("dump", "staging", "transfer", "load", "cache_reset", "end_to_end"):
            w["weight_sync"].write(_batch("weight_sync", k, {
                "ts_ns": sts + 1, "mono_ns": sts - T0, "step": st, "version": st + 1, "boundary": pa.repeat(
                    pa.scalar(b, pa.string()), k), "duration_s": rng.uniform(0.01, 0.02, k), "outcome": pa.repeat(
                    pa.scalar("ok", pa.string()), k), "tensors_expected": np.full(k, 10), "tensors_present": np.full(k, 10),
                "fingerprint_match": np.ones(k, bool) if b == "load" else None, "torn": np.zeros(k, bool) if b == "staging" else None,
                "reset_requested": np.ones(k, bool) if b == "cache_reset" else None,
                "reset_confirmed": np.ones(k, bool) if b == "cache_reset" else None}, "gen-bench", "generator"))
        w["heartbeat"].write(_batch("heartbeat", k, {"ts_ns": sts, "mono_ns": sts - T0, "step": st,
                                                      "phase": pa.repeat(pa.scalar("train", pa.string()), k)},
                                    "trainer-bench", "trainer"))
        total += 4 * n + 11 * k
    for writer in w.values():
        writer.close()
    return total


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--keep", type=Path, default=None)
    args = ap.parse_args(argv)
    tmp = tempfile.TemporaryDirectory() if args.keep is None else None
    path = Path(tmp.name) / "run" if tmp else args.keep
    build_s = 0.0
    if not (path / "manifest.json").exists():
        t0 = time.perf_counter()
        build(path, args.events)
        build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "rlobs", "doctor", str(path), "--json"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    report = json.loads(out.stdout)
    from rlobs.store import open_run

    with open_run(path) as rec:
        n = sum(rec.counts().values())
    result = {
        "events": n, "build_s": round(build_s, 1), "doctor_wall_s": round(wall, 2),
        "doctor_peak_rss_mb": round(peak_kb / 1024), "exit_code": out.returncode,
        "findings": [f["rule"] for f in report["findings"]], "rule_errors": report["rule_errors"],
        "insufficient": sorted(report["insufficient_data"]), "targets": {"doctor_wall_s": 10, "doctor_peak_rss_mb": 2048},
    }
    print(json.dumps(result, indent=2))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "doctor_speed.json").write_text(json.dumps(result, indent=2) + "\n")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
