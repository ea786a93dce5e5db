"""Telemetry never blocks training: step time with a broken telemetry path vs a healthy one.

    python -m bench.never_block [--steps 40]

One process trains a small causal transformer with a GRPO-style loss on the CPU (8 prompts x 4 samples x
64 tokens per step) and records, every step, what a trainer records: a span, a train_step through the
grad-norm probe, advantage health through the advantage probe, 32 rollouts, 96 ledger transitions and 32
grader calls (fast emitters), a heartbeat. Two recorders live side by side: a healthy one (run store +
an unscraped Prometheus endpoint) and one under a fault; steps alternate between them, so both see the
same machine load. Faults:

- ``prometheus_never_scraped``: the default (the healthy side too; listed for completeness)
- ``otlp_down``: OTEL_EXPORTER_OTLP_ENDPOINT points at a closed port
- ``otlp_hanging``: it points at a socket that accepts and never answers
- ``disk_full``: the run directory is a 256 KiB tmpfs (needs root to mount; skipped otherwise)
- ``read_only``: the run directory's tmpfs is remounted read-only after start (root)
- ``sink_raises``: an extra sink raises on every call

Reported per fault: median step time faulty / healthy - 1 (target within 1 %), the time spent inside
telemetry calls on each side, peak RSS growth, and the drops counted (``rlobs_telemetry_dropped_total``).
Saves bench/results/never_block.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

RESULTS = Path(__file__).resolve().parent / "results" / "never_block.json"
GROUPS, PER_GROUP, T, VOCAB, D = 8, 4, 64, 1024, 128


class _RaisingSink:
    name = "raising"

    def write(self, batch: Any) -> None:
        raise OSError("injected: sink raises on every call")

    def flush(self) -> None:
        raise OSError("injected")

    def close(self) -> None:
        raise OSError("injected")


@contextlib.contextmanager
def _tmpfs(size: str = "256k") -> Iterator[Path | None]:
    d = Path(tempfile.mkdtemp(prefix="rlobs-tmpfs-"))
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True).returncode == 0
    try:
        yield d if ok else None
    finally:
        if ok:
            subprocess.run(["umount", "-l", str(d)], capture_output=True)


@contextlib.contextmanager
def _fault_env(fault: str, base: Path) -> Iterator[dict[str, Any]]:
    """Yields init kwargs (and a callback to arm the fault after init) for ``fault``."""
    saved = {k: os.environ.get(k) for k in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TIMEOUT")}
    listener = None
    try:
        kw: dict[str, Any] = {"run_dir": base / fault, "arm": lambda: None}
        if fault in ("otlp_down", "otlp_hanging"):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if fault == "otlp_hanging":
                s.listen(64)
                listener = s
            else:
                s.close()
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
            os.environ["OTEL_EXPORTER_OTLP_TIMEOUT"] = "2"
        if fault == "sink_raises":
            kw["sinks"] = [_RaisingSink()]
        if fault in ("disk_full", "read_only"):
            with _tmpfs() as mnt:
                if mnt is None:
                    kw["skip"] = "cannot mount a tmpfs (needs root)"
                    yield kw
                    return
                kw["run_dir"] = mnt / "run"
                if fault == "read_only":
                    kw["arm"] = lambda: subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
                yield kw
                return
        yield kw
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if listener is not None:
            listener.close()


class Telemetry:
    """What a trainer records per step, bound to one recorder."""

    def __init__(self, rec: Any):
        import probes

        self.rec = rec
        self.grad = probes.GradNormProbe(rec, max_norm=1.0)
        self.adv = probes.AdvantageProbe(rec)
        self.rollout = rec.emitter("rollout", ("sample_id", "group_id", "completion_tokens", "finish_reason",
                                               "gen_seconds", "dispatch_version"))
        self.ledger = rec.emitter("ledger", ("sample_id", "group_id", "state", "tokens"))
        self.grader = rec.emitter("grader_call", ("sample_id", "grader_kind", "latency_s", "outcome", "reward"))
        self.seconds = 0.0

    def step(self, step: int, model: Any, rewards: Any, loss: float) -> None:
        import torch

        t0 = time.perf_counter()
        self.rec.set_step(step)
        with self.rec.span("train_step", step=step):
            for g in range(GROUPS):
                for i in range(PER_GROUP):
                    sid, gid = f"s{step}-{g}-{i}", f"g{step}-{g}"
                    r = float(rewards[g, i])
                    self.rollout(sid, gid, T, "stop", 0.2, step)
                    self.grader(sid, "rule", 0.01, "ok", r)
                    for state in ("generated", "graded", "consumed"):
                        self.ledger(sid, gid, state, T)
            self.adv.observe(rewards, token_denominator=float(GROUPS * PER_GROUP * T))
            norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
            self.grad.observe(grad_norm=norm, loss=loss, lr=1e-3)
            self.rec.heartbeat("train")
        self.seconds += time.perf_counter() - t0


def run_fault(fault: str, steps: int, base: Path) -> dict[str, Any]:
    import torch

    import rlobs

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(D, 4, 4 * D, dropout=0.0, batch_first=True)
    model = torch.nn.ModuleDict({"embed": torch.nn.Embedding(VOCAB, D),
                                 "body": torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                                 "head": torch.nn.Linear(D, VOCAB)})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    with _fault_env(fault, base) as kw:
        if kw.get("skip"):
            return {"skipped": kw["skip"]}
        healthy = rlobs.init(base / f"healthy-{fault}", component="trainer", set_global=False, prometheus=True)
        faulty = rlobs.init(kw["run_dir"], component="trainer", set_global=False, prometheus=True,
                            sinks=kw.get("sinks", ()))
        kw["arm"]()
        tel = {"healthy": Telemetry(healthy), "faulty": Telemetry(faulty)}
        times: dict[str, list[float]] = {"healthy": [], "faulty": []}
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for step in range(steps):
            side = "faulty" if step % 2 else "healthy"
            t0 = time.perf_counter()
            x = torch.randint(0, VOCAB, (GROUPS * PER_GROUP, T))
            h = model["body"](model["embed"](x))
            logp = torch.log_softmax(model["head"](h), -1).gather(-1, x.unsqueeze(-1)).squeeze(-1)
            rewards = (torch.rand(GROUPS, PER_GROUP) < 0.4).float()
            adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)
            loss = -(adv.view(-1, 1) * logp).mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            tel[side].step(step, model, rewards, float(loss))
            opt.step()
            opt.zero_grad()
            times[side].append(time.perf_counter() - t0)
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        faulty.close(timeout=5.0)
        close_s = time.perf_counter() - t0
        healthy.close()
        med_h, med_f = statistics.median(times["healthy"][2:]), statistics.median(times["faulty"][2:])
        stats = faulty.stats()
        return {
            "median_step_ms_healthy": round(med_h * 1e3, 2), "median_step_ms_faulty": round(med_f * 1e3, 2),
            "step_time_change_pct": round((med_f / med_h - 1) * 100, 2),
            "telemetry_ms_per_step_healthy": round(tel["healthy"].seconds / len(times["healthy"]) * 1e3, 3),
            "telemetry_ms_per_step_faulty": round(tel["faulty"].seconds / len(times["faulty"]) * 1e3, 3),
            "max_rss_growth_mb": round((rss1 - rss0) / 1024, 1), "close_s": round(close_s, 2),
            "dropped": {f"{r}@{s}": n for (r, s), n in sorted(stats["dropped"].items())},
        }


FAULTS = ("prometheus_never_scraped", "otlp_down", "otlp_hanging", "disk_full", "read_only", "sink_raises")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--faults", default=",".join(FAULTS))
    args = ap.parse_args(argv)
    out: dict[str, Any] = {"steps_per_fault": args.steps, "load_avg": os.getloadavg(), "faults": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for fault in args.faults.split(","):
            out["faults"][fault] = r = run_fault(fault, args.steps, Path(tmp))
            print(fault, json.dumps(r), flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"saved {RESULTS}")
    return out


if __name__ == "__main__":
    main()
