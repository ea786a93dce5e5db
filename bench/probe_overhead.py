"""All probes on vs off in a plain PyTorch GRPO-style loop on the CPU: overhead in % of step time.

    python -m bench.probe_overhead [--steps 40] [--quick]

The workload is a small causal transformer (2 layers, d=128, vocab 1024) trained on a batch of
8 prompts x 4 samples x 64 tokens with a GRPO loss. Steps alternate between "off" (no probe calls)
and "on" (every probe a trainer would call per step: a ledger transition per sample, staleness with
importance-ratio stats, advantage health, grad norm (the pre-clip norm clip_grad_norm_ returns), train/serve
parity, goodput, liveness phases, a grader call per sample, throughput, and a weight sync with all five
boundaries and full fingerprints at dump and load), each against a real recorder (run store +
Prometheus). The overhead is median(on) / median(off) - 1, and also the median of per-pair
differences. Because other processes share the CPU, the time spent inside probe calls is also
measured directly on the "on" steps (``probe_ms_per_step_direct``), and so is the CPU time of the
recorder's background threads (flusher, sink workers, watchdog; ``background_telemetry_cpu_ms_per_step``
from /proc): their sum over the median "off" step (``overhead_pct_direct_plus_background``) is the
most stable figure on a shared machine. Results are printed and saved to ``bench/results/probe_overhead.json``.
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
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "probe_overhead.json"
GROUPS, PER_GROUP, T, VOCAB, D = 8, 4, 64, 1024, 128


def _model() -> Any:
    import torch

    layer = torch.nn.TransformerEncoderLayer(D, 4, 4 * D, dropout=0.0, batch_first=True)
    return torch.nn.ModuleDict({"embed": torch.nn.Embedding(VOCAB, D),
                                "body": torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                                "head": torch.nn.Linear(D, VOCAB)})


def _thread_cpu_s(prefix: str = "rlobs") -> float:
    """CPU seconds used so far by this process's threads whose name starts with ``prefix`` (Linux /proc)."""
    import threading

    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for th in threading.enumerate():
        if not th.name.startswith(prefix) or th.native_id is None:
            continue
        try:
            fields = Path(f"/proc/self/task/{th.native_id}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return total


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="steps per arm (on and off alternate)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    steps = 6 if args.quick else args.steps

    import numpy as np
    import torch

    import probes
    import rlobs

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = _model()
    opt = torch.optim.AdamW([{"params": model["embed"].parameters(), "name": "embed"},
                             {"params": model["body"].parameters(), "name": "body"},
                             {"params": model["head"].parameters(), "name": "head"}], lr=1e-4)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(T)
    B = GROUPS * PER_GROUP
    rng = np.random.default_rng(0)

    with tempfile.TemporaryDirectory() as tmp:
        rec = rlobs.init(Path(tmp) / "run", component="trainer", prometheus=True)
        acct = probes.GoodputAccount()
        ledger = probes.SampleLedger(goodput=acct)
        stal = probes.StalenessProbe(ledger=ledger, max_staleness=4)
        advp = probes.AdvantageProbe()
        gradp = probes.GradNormProbe(max_norm=1.0)
        parity = probes.ParityProbe()
        live = probes.Liveness()
        graders = probes.GraderProbe(deadline_s=30.0)
        meter = probes.ThroughputMeter(window_s=5.0)
        sync = probes.WeightSyncProbe()
        times = {"on": [], "off": []}
        probe_s: list[float] = []
        version = 0

        def timed(fn: Any, *a: Any) -> tuple[Any, float]:
            t = time.perf_counter()
            out = fn(*a)
            return out, time.perf_counter() - t

        def before(k: int, ids: list[str]) -> list[Any]:
            rec.set_step(k)
            tags = [probes.tag_dispatch(version - int(rng.integers(0, 2))) for _ in range(B)]
            for i, sid in enumerate(ids):
                probes.record_rollout(sid, tags[i], group_id=f"g{k}-{i // PER_GROUP}", completion_tokens=T,
                                      finish_reason="stop", ledger=ledger)
            for i, sid in enumerate(ids):
                graders.call("exact", float, i % 2, sample_id=sid)  # the probe wraps a trivial grader
                ledger.graded(sid)
            return tags

        def after_backward(ids: list[str], tags: list[Any], rewards: Any, adv: Any, gen_lp: Any, logp: Any,
                           loss: float, norm: Any) -> None:
            stal.consume(ids, tags, version, gen_logprobs=gen_lp, train_logprobs=logp)
            advp.observe(rewards, advantages=adv, token_denominator=float(B * (T - 1)))
            parity.observe(gen_lp, logp, sample_ids=ids)
            gradp.observe(grad_norm=norm, groups=opt, sample_ids=ids, loss=loss, lr=1e-4,
                          samples=B, tokens=B * (T - 1))
            acct.add_batch([T - 1] * B, zero_advantage=[False] * B)
            acct.emit_step()
            meter.produced(B, B * T)
            meter.tick()

        def weight_sync() -> None:
            with sync.sync(version) as s:
                with s.dump() as b:
                    state = model.state_dict()
                    b.record_state(state)
                with s.transfer() as b:
                    b.bytes = sum(v.numel() * v.element_size() for v in state.values())
                with s.load() as b:
                    b.record_state(state)
                with s.cache_reset() as b:
                    b.requested()
                    b.confirmed(True)
            parity.on_sync(version)

        def step(on: bool, k: int) -> float:
            nonlocal version
            tokens = torch.randint(0, VOCAB, (B, T))
            gen_lp = torch.randn(B, T - 1) * 0.1 - 2.0
            ids = [f"s{k}-{i}" for i in range(B)]
            spent = 0.0
            t0 = time.perf_counter()
            if on:
                tags, dt = timed(before, k, ids)
                spent += dt
            rewards = torch.tensor([float(i % 2) for i in range(B)]).view(GROUPS, PER_GROUP)
            t_phase = time.perf_counter()
            ctx = live.phase("train", tokens=B * T) if on else _null()
            ctx.__enter__()
            spent += time.perf_counter() - t_phase if on else 0.0
            adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)
            h = model["body"](model["embed"](tokens), mask=mask, is_causal=True)
            logp = torch.log_softmax(model["head"](h[:, :-1]), -1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
            loss = -(torch.exp(logp - gen_lp) * adv.view(-1, 1)).mean()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # returns the pre-clip norm
            if on:
                _, dt = timed(after_backward, ids, tags, rewards, adv, gen_lp, logp.detach(), loss.item(), norm)
                spent += dt
            opt.step()
            opt.zero_grad()
            t_phase = time.perf_counter()
            ctx.__exit__(None, None, None)
            spent += time.perf_counter() - t_phase if on else 0.0
            version += 1
            if on:
                _, dt = timed(weight_sync)
                probe_s.append(spent + dt)
            return time.perf_counter() - t0

        step(False, -2)
        step(True, -1)  # warm up both paths
        rec.flush()
        bg0 = _thread_cpu_s()
        for k in range(steps):
            for arm in (("off", "on") if k % 2 == 0 else ("on", "off")):
                times[arm].append(step(arm == "on", k))
        rec.flush()
        background_s = _thread_cpu_s() - bg0
        dropped = rec.stats()["dropped_total"]
        graders.close()
        rlobs.shutdown()

    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    pairs = [a - b for a, b in zip(times["on"], times["off"])]
    report = {
        "benchmark": "probe_overhead", "steps_per_arm": steps, "quick": args.quick,
        "workload": f"transformer 2x{D}, vocab {VOCAB}, batch {GROUPS}x{PER_GROUP}x{T} tokens, AdamW, CPU",
        "median_step_s": {"off": round(off, 5), "on": round(on, 5)},
        "overhead_pct_median": round((on / off - 1) * 100, 3),
        "overhead_pct_paired": round(statistics.median(pairs) / off * 100, 3),
        "probe_ms_per_step_paired": round(statistics.median(pairs) * 1e3, 3),
        "probe_ms_per_step_direct": round(statistics.median(probe_s[1:]) * 1e3, 3),
        "overhead_pct_direct": round(statistics.median(probe_s[1:]) / off * 100, 3),
        "background_telemetry_cpu_ms_per_step": round(background_s / steps * 1e3, 3),
        "overhead_pct_direct_plus_background": round(
            (statistics.median(probe_s[1:]) + background_s / steps) / off * 100, 3),
        "telemetry_dropped": dropped,
        "load_average": list(os.getloadavg()),
        "step_s": {arm: [round(x, 4) for x in v] for arm, v in times.items()},
        "probe_s_per_step": [round(x, 5) for x in probe_s],
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "torch_threads": torch.get_num_threads()},
    }
    print(json.dumps(report, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return report


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


if __name__ == "__main__":
    main()
