"""Core benchmarks: hot-path cost, sustained ingest into the run record, query speed on 10M events.

    python -m bench.core                # all three, prints a table, saves bench/results/core.json
    python -m bench.core hot_path       # one of: hot_path, ingest, query
    python -m bench.core query --events 10000000

Targets (issue #2): emit median <= 2 us, counter increment <= 1 us; ingest >= 300,000 events/s on one
core (with the flusher's CPU share); `rlobs info` and a per-step aggregate over 10M events <= 5 s each.
Timings are medians over repeats measured in one run; the machine is noisy, so compare ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def _thread_cpu_s(native_id: int) -> float:
    try:
        fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def bench_hot_path(repeats: int = 300, inner: int = 200) -> dict[str, Any]:
    import rlobs

    with tempfile.TemporaryDirectory() as tmp:
        rec = rlobs.init(Path(tmp) / "run", component="bench", prometheus=True, max_queue=10_000_000)
        emit = rec.emit
        per_call = []
        for r in range(repeats):
            t0 = time.perf_counter_ns()
            for i in range(inner):
                emit("grader_call", sample_id="s-1", grader_kind="exact", latency_s=0.0123, outcome="ok", reward=1.0)
            per_call.append((time.perf_counter_ns() - t0) / inner / 1000)
            if r % 50 == 0:
                rec.flush()
        fast = rec.emitter("grader_call", ("sample_id", "grader_kind", "latency_s", "outcome", "reward"))
        fast_us = []
        for r in range(repeats):
            t0 = time.perf_counter_ns()
            for i in range(inner):
                fast("s-1", "exact", 0.0123, "ok", 1.0)
            fast_us.append((time.perf_counter_ns() - t0) / inner / 1000)
            if r % 50 == 0:
                rec.flush()
        rec.flush()  # let the background threads settle: the counter is measured on its own
        time.sleep(0.5)
        child = rec.counter("rlobs_grader_calls_total", grader_kind="exact", outcome="ok")
        inc = child.inc
        inc_us = []
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            for _ in range(inner):
                inc()
            inc_us.append((time.perf_counter_ns() - t0) / inner / 1000)
        span_us = []
        for _ in range(50):
            t0 = time.perf_counter_ns()
            for _ in range(20):
                with rec.span("grader_batch", n=8):
                    pass
            span_us.append((time.perf_counter_ns() - t0) / 20 / 1000)
        rlobs.shutdown()
    return {
        "emit_median_us": round(statistics.median(per_call), 3),
        "emit_p90_us": round(sorted(per_call)[int(0.9 * len(per_call))], 3),
        "fast_emitter_median_us": round(statistics.median(fast_us), 3),
        "counter_inc_median_us": round(statistics.median(inc_us), 3),
        "span_median_us": round(statistics.median(span_us), 3),
        "targets": {"emit_median_us": 2.0, "counter_inc_median_us": 1.0},
    }


def bench_ingest(events: int = 2_000_000, fast: bool = True) -> dict[str, Any]:
    """Producer + flusher + run-store writer all pinned to ONE core; end-to-end events/s to disk.

    ``fast``: the producer uses ``Recorder.emitter`` (the hot-path API probes use for per-sample
    events); otherwise the generic ``Recorder.emit(kind, **fields)``.
    """
    import rlobs
    from rlobs.store import open_run

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        rec = rlobs.init(run, component="bench", prometheus=False, max_queue=events + 10, flush_interval=0.5)
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        if fast:
            fast_emit = rec.emitter("ledger", ("sample_id", "group_id", "state", "tokens"))
            for i in range(events):
                fast_emit("s", "g", "generated", i & 1023, step=i >> 12)
        else:
            emit = rec.emit
            for i in range(events):
                emit("ledger", sample_id="s", group_id="g", state="generated", tokens=i & 1023, step=i >> 12)
        t_emit = time.perf_counter() - t0
        rec.flush(timeout=600)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        threads = {t.name: t.native_id for t in threading.enumerate()}
        bg_cpu = sum(_thread_cpu_s(tid) for name, tid in threads.items()
                     if name.startswith("rlobs-") and tid is not None)
        dropped = rec.stats()["dropped_total"]
        rlobs.shutdown(timeout=120)
        with open_run(run) as record:
            stored = record.counts().get("ledger", 0)
        disk = sum(f.stat().st_size for f in (run / "events").rglob("*") if f.is_file())
    return {
        "api": "Recorder.emitter (fast path)" if fast else "Recorder.emit (generic)",
        "events": events,
        "ingest_events_per_s": round(events / wall),
        "producer_only_events_per_s": round(events / t_emit),
        # CPU-seconds of the whole process (producer + flusher + writer): what one uncontended core sustains
        "events_per_cpu_s": round(events / cpu),
        "flusher_and_writer_cpu_share": round(bg_cpu / wall, 3),
        "process_cpu_s": round(cpu, 2),
        "wall_s": round(wall, 2),
        "stored": stored,
        "dropped": dropped,
        "bytes_per_event_on_disk": round(disk / max(stored, 1), 2),
        "target_events_per_s": 300_000,
    }


def make_big_record(path: Path, events: int, steps: int = 10_000) -> None:
    """A record of ``events`` rollout events over ``steps`` steps, written through the real segment writer."""
    import numpy as np
    import pyarrow as pa

    from rlobs.schema import arrow_schema
    from rlobs.store import SegmentWriter, ensure_manifest

    ensure_manifest(path, name="bench-10m")
    schema = arrow_schema("rollout")
    rng = np.random.default_rng(0)
    chunk = 1_000_000
    procs = 4
    writers = [SegmentWriter(path / "events" / "rollout", "rollout", f"generator-r{p}-bench", max_bytes=256 << 20)
               for p in range(procs)]
    done = 0
    t_base = 1_790_000_000_000_000_000
    while done < events:
        n = min(chunk, events - done)
        idx = np.arange(done, done + n)
        step = idx * steps // events
        cols = {
            "ts_ns": pa.array(t_base + idx * 1000, pa.int64()),
            "mono_ns": pa.array(idx * 1000, pa.int64()),
            "run_id": pa.repeat(pa.scalar("bench", pa.string()), n),
            "process": pa.repeat(pa.scalar(f"generator-r{(done // chunk) % procs}-bench", pa.string()), n),
            "component": pa.repeat(pa.scalar("generator", pa.string()), n),
            "rank": pa.repeat(pa.scalar((done // chunk) % procs, pa.int32()), n),
            "step": pa.array(step, pa.int64()),
            "policy_version": pa.array(step, pa.int64()),
            "sample_id": pa.array([f"s{i}" for i in idx.tolist()], pa.string()),
            "group_id": pa.array([f"g{i // 8}" for i in idx.tolist()], pa.string()),
            "dispatch_version": pa.array(step - rng.integers(0, 3, n), pa.int64()),
            "completion_tokens": pa.array(rng.lognormal(4.0, 0.8, n).astype("int32"), pa.int32()),
            "finish_reason": pa.array(np.where(rng.random(n) < 0.05, "length", "stop"), pa.string()),
            "gen_seconds": pa.array(rng.lognormal(0.0, 0.5, n), pa.float64()),
        }
        arrays = [cols.get(f.name, pa.nulls(n, f.type)) for f in schema]
        writers[(done // chunk) % procs].write(pa.RecordBatch.from_arrays(arrays, schema=schema))
        done += n
    for w in writers:
        w.close()


def bench_query(events: int = 10_000_000, keep: Path | None = None) -> dict[str, Any]:
    from rlobs.store import open_run

    tmp = tempfile.TemporaryDirectory() if keep is None else None
    path = Path(tmp.name) / "run" if tmp else keep
    if not (path / "manifest.json").exists():
        t0 = time.perf_counter()
        make_big_record(path, events)
        build_s = time.perf_counter() - t0
    else:
        build_s = 0.0
    env = {**os.environ, "COLUMNS": "120"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "rlobs", "info", str(path)], capture_output=True, text=True, env=env)
    info_cli_s = time.perf_counter() - t0
    assert out.returncode == 0, out.stderr
    t0 = time.perf_counter()
    with open_run(path) as rec:
        open_s = time.perf_counter() - t0
        n = rec.counts()["rollout"]
        t1 = time.perf_counter()
        rows = rec.sql("SELECT step, count(*) AS n, avg(completion_tokens) AS mean_len, "
                       "quantile_cont(gen_seconds, 0.99) AS p99, avg((finish_reason = 'length')::INT) AS trunc, "
                       "max(step - dispatch_version) AS max_stale FROM rollout GROUP BY step ORDER BY step").fetchall()
        agg_s = time.perf_counter() - t1
    if tmp:
        tmp.cleanup()
    return {
        "events": n,
        "steps": len(rows),
        "build_s": round(build_s, 1),
        "rlobs_info_cli_s": round(info_cli_s, 2),
        "open_run_s": round(open_s, 3),
        "per_step_aggregate_s": round(agg_s, 2),
        "target_s": 5.0,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("which", nargs="*", default=["hot_path", "ingest", "query"])
    ap.add_argument("--events", type=int, default=10_000_000, help="events in the query benchmark's record")
    ap.add_argument("--ingest-events", type=int, default=2_000_000)
    ap.add_argument("--keep", type=Path, default=None, help="build/reuse the 10M-event record here")
    args = ap.parse_args(argv)
    results: dict[str, Any] = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
                               "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    for which in args.which:
        if which == "hot_path":
            results["hot_path"] = bench_hot_path()
        elif which == "ingest":
            # in a child process so its one-core pinning does not leak into the other benchmarks
            results["ingest"] = {}
            for fast in (True, False):
                out = subprocess.run([sys.executable, "-c", f"import json, bench.core as b; "
                                      f"print(json.dumps(b.bench_ingest({args.ingest_events}, fast={fast})))"],
                                     capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
                if out.returncode != 0:
                    raise SystemExit(out.stderr)
                results["ingest"]["fast" if fast else "generic"] = json.loads(out.stdout.strip().splitlines()[-1])
        elif which == "query":
            results["query"] = bench_query(args.events, args.keep)
        else:
            raise SystemExit(f"unknown benchmark {which!r}; valid: hot_path, ingest, query")
        print(f"{which}: {json.dumps(results[which])}", flush=True)
    RESULTS.mkdir(exist_ok=True)
    name = "core.json" if len(args.which) == 3 else f"core_{'_'.join(args.which)}.json"
    (RESULTS / name).write_text(json.dumps(results, indent=2) + "\n")
    print(f"saved {RESULTS / name}")


if __name__ == "__main__":
    main()
