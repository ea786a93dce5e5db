"""Per-probe cost on the caller's thread: microseconds per call, median of repeats.

    python -m bench.probe_costs [--repeats 7] [--quick]

Each probe runs against a real recorder (``rlobs.init`` with the run store and Prometheus sinks, in a
temporary run directory), so a figure is what the training loop pays: the probe's own computation plus
``emit`` (the sinks work on background threads). Every case runs ``n`` calls per repeat; the figure is
the median over repeats of (repeat time / n). Results are printed and saved to
``bench/results/probe_costs.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "probe_costs.json"


def _time(fn: Callable[[], Any], n: int, repeats: int, rec: Any) -> float:
    fn()  # warm up
    per_call = []
    for _ in range(repeats):
        rec.flush()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        per_call.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(per_call)


def cases(rec: Any, quick: bool) -> list[tuple[str, str, int, Callable[[], Any]]]:
    import torch

    import probes
    from probes.ledger import SampleLedger

    rng = np.random.default_rng(0)
    out: list[tuple[str, str, int, Callable[[], Any]]] = []
    n = 200 if quick else 2000

    out.append(("rlobs.emit (baseline)", "one event", n * 5, lambda: rec.emit("scalar", name="x", value=1.0)))

    led = SampleLedger()
    counter = iter(range(10**9))
    out.append(("ledger.transition", "one transition", n * 5, lambda: led.generated(f"s{next(counter)}", tokens=10)))

    sp = probes.StalenessProbe(ledger=SampleLedger(), is_cap=2.0)
    tags = [probes.tag_dispatch(v) for v in rng.integers(0, 4, 64)]
    gen = rng.normal(-1.0, 0.3, (64, 256))
    train = gen + rng.normal(0, 0.01, (64, 256))
    bcount = iter(range(10**9))

    def staleness_batch() -> None:
        b = next(bcount)
        sp.consume([f"b{b}-{i}" for i in range(64)], tags, 5, gen_logprobs=gen, train_logprobs=train)

    out.append(("staleness.consume", "batch of 64 samples x 256 tokens (64 ledger events + IS stats)",
                max(n // 20, 20), staleness_batch))

    adv = probes.AdvantageProbe()
    rewards = rng.integers(0, 2, (64, 8)).astype(float)
    out.append(("advantage.observe", "64 groups x 8 samples", max(n // 10, 20),
                lambda: adv.observe(rewards, token_denominator=12345.0)))

    gp = probes.GradNormProbe(max_norm=1.0)
    out.append(("gradnorm.observe(grad_norm=)", "one step, norm given", n,
                lambda: gp.observe(grad_norm=1.0 + rng.random() * 0.1)))
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 8))
    model(torch.randn(4, 512)).sum().backward()
    gp2 = probes.GradNormProbe(max_norm=1.0)
    out.append(("gradnorm.observe(parameters=)", "one step, 0.53M params, norm computed", max(n // 10, 20),
                lambda: gp2.observe(parameters=model.parameters())))

    ws = probes.WeightSyncProbe()
    vcount = iter(range(10**9))

    def sync_bookkeeping() -> None:
        with ws.sync(next(vcount)) as s:
            for name in ("dump", "staging", "transfer", "load"):
                with s.boundary(name) as b:
                    b.bytes = 1
            with s.cache_reset() as b:
                b.requested()
                b.confirmed()

    out.append(("weight_sync.sync", "5 boundaries + end_to_end, 7 spans, no fingerprints", max(n // 10, 20),
                sync_bookkeeping))
    blob = {"w": np.ones(1 << 18, dtype=np.float32)}  # 1 MiB
    out.append(("weight_sync.fingerprints", "per MiB of weights (xxh3-64, host memory)", max(n // 10, 20),
                lambda: probes.fingerprints(blob)))

    gr = probes.GraderProbe(watchdog=False)
    out.append(("grader.call", "one call of a trivial grader", n, lambda: gr.call("exact", float, 1)))

    tm = probes.ThroughputMeter(window_s=1e9)
    out.append(("throughput.produced", "one count", n * 5, lambda: tm.produced(1, 100)))

    pp = probes.ParityProbe()
    out.append(("parity.observe", "batch of 64 x 256 tokens", max(n // 20, 20), lambda: pp.observe(gen, train)))

    lv = probes.Liveness()

    def one_phase() -> None:
        with lv.phase("train"):
            pass

    out.append(("liveness.phase", "one phase (heartbeat + phase event)", n, one_phase))

    acct = probes.GoodputAccount()
    toks = rng.integers(10, 500, 64)
    zero = rng.random(64) < 0.2

    def goodput_step() -> None:
        acct.add_batch(toks, zero_advantage=zero)
        acct.emit_step()

    out.append(("goodput.step", "64-sample batch + emit_step", max(n // 10, 20), goodput_step))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="fewer calls per repeat (smoke run)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    import rlobs

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        rec = rlobs.init(Path(tmp) / "run", component="bench", prometheus=True, max_queue=2_000_000)
        try:
            for name, what, n, fn in cases(rec, args.quick):
                us = _time(fn, n, args.repeats, rec)
                results[name] = {"us_per_call": round(us, 3), "what": what, "calls_per_repeat": n}
                print(f"{name:34s} {us:10.2f} us   ({what})", flush=True)
            rec.flush()
            dropped = rec.stats()["dropped_total"]
        finally:
            rlobs.shutdown()
    report = {
        "benchmark": "probe_costs", "unit": "microseconds per call, median of repeats",
        "repeats": args.repeats, "quick": args.quick, "telemetry_dropped": dropped,
        "load_average": list(os.getloadavg()),
        "machine": {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()},
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {args.out}")
    return report


if __name__ == "__main__":
    main()
