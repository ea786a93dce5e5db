"""A small rlobs-instrumented "run" that feeds the dashboards' integration test.

It calls ``rlobs.init`` once per component (trainer ranks 0 and 1, generator, grader, buffer; one
recorder each, so each serves its own ``/metrics`` on 127.0.0.1 and writes its own file_sd target)
and emits, every ``--period`` seconds, the events a real async GRPO step produces: rollouts, grader
calls and watchdog samples, ledger transitions, queue and throughput samples, the five weight-sync
boundaries plus end to end, train step, advantage, staleness, parity, phases, goodput, heartbeats.

``--faults`` injects a fault pattern from ``--onset`` steps on: staleness over the bound, a torn
staging read, a slow transfer, a fingerprint mismatch at load, an unconfirmed cache reset, NaN and
spiking grad norms, collapsed denominators with disagreeing ranks, grader timeouts and overdue calls,
a starved trainer, parity drift with mismatched config hashes, and invalid events (telemetry drops).

With ``--faults``, any catalogue metric the realistic pass does not feed in its first three faulty steps (a metric
appended to the catalogue later) is fed from then on by a synthetic event built from its ``Source`` so every
dashboard panel still has data; those names go to ``<run_dir>/synthetic_metrics.json`` (the test
prints them: give them a realistic event here).

    python tests/dashboards/emit_run.py RUN_DIR --run-id r1 [--faults] [--seconds 60]

Stops on SIGTERM/SIGINT (clean shutdown removes the file_sd files) or after ``--seconds``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # run as a script: the repo root, for tests.*
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import rlobs  # noqa: E402
from rlobs.catalogue import METRICS, MetricSpec  # noqa: E402
from rlobs.schema import KINDS  # noqa: E402
from tests.status_channel import report  # noqa: E402

BOUNDARIES = ("dump", "staging", "transfer", "load", "cache_reset")
INVALID_EVENTS_PER_STEP = 2


class Run:
    def __init__(self, run_dir: Path, run_id: str, faults: bool, onset: int, period: float, seed: int):
        self.faults, self.onset, self.period = faults, onset, period
        self.rng = random.Random(seed)
        hashes = {"tokenizer": "tok-1", "chat_template": "tpl-1", "sampling": "samp-1"}
        # the faulty run bounds staleness on the completion (trainer_ref --staleness-basis completion) and records
        # what it bounds (staleness.max_bounded_staleness): the staleness alert reads it; the healthy run bounds dispatch
        cfg = {"mode": "separate_async", "max_staleness": 4, "group_size": 8, "faults": faults,
               **({"staleness_basis": "completion"} if faults else {})}

        def start(component: str, rank: int = 0) -> Any:
            return rlobs.init(run_dir, component=component, rank=rank, run_id=run_id, config=cfg, hashes=hashes,
                              set_global=False, flush_interval=0.2)

        self.trainers = [start("trainer", 0), start("trainer", 1)]
        self.gen = start("generator")
        self.grader = start("grader")
        self.buffer = start("buffer")
        self.recorders = [*self.trainers, self.gen, self.grader, self.buffer]
        self.emitted: list[tuple[str, dict[str, Any]]] = []
        self.synthetic: list[str] = []
        self.invalid_sent = 0

    def emit(self, rec: Any, kind: str, **fields: Any) -> None:
        rec.emit(kind, **fields)
        if len(self.emitted) < 5000:
            self.emitted.append((kind, fields))

    def faulty(self, step: int) -> bool:
        return self.faults and step >= self.onset

    # ---- one step of the loop ----
    def step(self, step: int) -> None:
        bad, r, p = self.faulty(step), self.rng, self.period
        for rec in self.recorders:
            rec.set_step(step)
            rec.set_policy_version(step)
        staleness = r.choice((10, 11, 12)) if bad else r.choice((0, 1, 1, 2))
        newest = max(0, staleness - 1)  # the newest tokens' staleness: one version newer than the dispatch
        # generator: rollouts, ledger, queue, throughput
        for i in range(8):
            sid = f"s{step}-{i}"
            tokens = r.randint(40, 400)
            self.emit(self.gen, "rollout", sample_id=sid, group_id=f"g{step}-{i // 4}", prompt_id=f"p{i}",
                      dispatch_version=step - staleness, min_token_version=step - staleness,
                      max_token_version=step - newest, prompt_tokens=64, completion_tokens=tokens,
                      finish_reason="length" if i == 7 else "stop", gen_seconds=r.uniform(0.5, 3.0))
            self.emit(self.gen, "ledger", sample_id=sid, group_id=f"g{step}", state="generated", tokens=tokens)
            self.emit(self.buffer, "ledger", sample_id=sid, group_id=f"g{step}", state="consumed", tokens=tokens,
                      staleness=staleness, age_s=r.uniform(1, 5) * (1 + staleness), duplicate=False)
        if bad:  # a resume that replays samples: one is consumed a second time
            self.emit(self.buffer, "ledger", sample_id=f"s{step - 1}-0", group_id=f"g{step - 1}", state="consumed",
                      tokens=100, staleness=staleness + 1, age_s=30.0, duplicate=True)
        if bad:
            self.emit(self.buffer, "ledger", sample_id=f"s{step}-x", group_id=f"g{step}", state="dropped",
                      reason="stale", tokens=100, age_s=40.0)
        self.emit(self.buffer, "ledger", sample_id=f"s{step}-t", group_id=f"g{step}", state="dropped",
                  reason="truncated", tokens=512, age_s=2.0)
        self.emit(self.buffer, "queue", queue="rollouts", depth=r.randint(10, 30), capacity=64,
                  oldest_age_s=r.uniform(1, 8))
        self.emit(self.gen, "throughput", window_s=p, samples=8, tokens=1600, samples_per_s=8 / p,
                  tokens_per_s=1600 / p, effective_samples_per_s=7 / p, idle_ratio=0.05, sync_bubble_s=0.02,
                  predicted_staleness=1.4)
        data_wait = 0.8 * p if bad else 0.05 * p
        self.emit(self.trainers[0], "throughput", window_s=p, samples=8, tokens=1500, samples_per_s=8 / p,
                  tokens_per_s=1500 / p, idle_ratio=data_wait / p)
        # grader: calls and watchdog
        for i in range(8):
            timeout = bad and i % 3 == 0
            kind = ("code", "judge")[i % 2]
            self.emit(self.grader, "grader_call", sample_id=f"s{step}-{i}", grader_kind=kind,
                      queue_wait_s=r.uniform(150, 250) if bad else r.uniform(0.01, 0.2),  # a saturated pool
                      latency_s=30.0 if timeout else r.uniform(0.05, 1.5),
                      outcome="timeout" if timeout else "ok", reward=None if timeout else float(r.random() > 0.5),
                      error="deadline exceeded" if timeout else None)
        for kind in ("code", "judge"):
            overdue = 2 if bad and kind == "judge" else 0
            self.emit(self.grader, "grader_inflight", grader_kind=kind, in_flight=3 + overdue, overdue=overdue,
                      oldest_age_s=95.0 if overdue else r.uniform(0.1, 2.0), deadline_s=60.0)
        # trainer: advantage per rank, staleness, train step, parity
        for rank, rec in enumerate(self.trainers):
            denom = 1500.0 + (37.0 if bad and rank == 1 else 0.0)
            self.emit(rec, "advantage", groups=16, zero_std_groups=13 if bad else 2, near_zero_std_groups=5 if bad else 0,
                      near_zero_threshold=1e-3, zero_std_ratio=13 / 16 if bad else 2 / 16,
                      near_zero_std_ratio=5 / 16 if bad else 0.0, max_abs_advantage=48.0 if bad else 2.6,
                      denom_min=2e-5 if bad else 0.21, denom_p50=0.4, denom_max=0.5,
                      nonfinite_denominators=1 if bad else 0, token_denominator=denom, ranks_agree=not bad,
                      rank_denominators=json.dumps([1500.0, denom]))
        t0 = self.trainers[0]
        self.emit(t0, "staleness", samples=8, max_staleness=staleness, mean_staleness=staleness * 0.8,
                  histogram=json.dumps({str(staleness): 8}), mean_age_s=3.0, max_age_s=6.0,
                  is_ratio_mean=1.0 + 0.1 * staleness, is_ratio_max=1.2 + 0.5 * staleness,
                  is_clipped_ratio=0.3 if bad else 0.01, ess_ratio=0.6 if bad else 0.97, is_correction_cap=2.0,
                  max_bounded_staleness=newest if self.faults else None)
        nonfinite = bad and step % 2 == 0
        spike = bad and not nonfinite
        grad = math.nan if nonfinite else (1.2e4 if spike else r.uniform(0.8, 1.5))
        for rec in self.trainers:
            self.emit(rec, "train_step", loss=r.uniform(0.1, 0.4), grad_norm=grad, grad_norm_clipped=min(grad, 1.0),
                      clipped=grad > 1.0, nonfinite=nonfinite, spike=spike, spike_score=25.0 if spike else 0.4,
                      lr=1e-6, samples=8, tokens=1500, step_seconds=0.1 * p, data_wait_s=data_wait,
                      reward_wait_s=data_wait * 0.7, reward_mean=r.uniform(0.3, 0.6), reward_std=0.4,
                      entropy=r.uniform(0.6, 0.9), kl=0.01, policy_kl=0.005)
        if step % 5 == 0:  # a held-out evaluation (an exact check on unseen prompts) and the grader audit
            # realistic, not the synthetic 1.0: a run at reward 1.0 and held-out success 1.0 is a solved task, and
            # the zero-std alert is quiet on one
            self.emit(t0, "scalar", name="rlobs/heldout_success", value=r.uniform(0.3, 0.5))
            self.emit(t0, "scalar", name="rlobs/grader_audit_gap", value=0.02)
        self.emit(t0, "parity", tokens=1500, mean_abs_dlogp=0.05 if bad else 0.002, max_abs_dlogp=0.9 if bad else 0.03,
                  kl_k1=0.001, kl_k2=0.001, kl_k3=0.04 if bad else 0.0008, first_after_sync=True, hashes_match=not bad,
                  mismatched_hashes=json.dumps(["sampling"] if bad else []))
        self.weight_sync(step, bad)
        # phases, goodput, heartbeats
        for rec, phase, secs in ((t0, "training", 0.1 * p), (t0, "wait", data_wait), (self.gen, "generation", 0.8 * p),
                                 (self.grader, "grading", 0.5 * p), (self.gen, "sync", 0.05 * p)):
            self.emit(rec, "phase", phase=phase, seconds=secs, tokens=1500)
        accounted = {"effective": 1200, "stale": 300 if bad else 0, "truncated": 100}
        for cat, tokens in accounted.items():
            ratio = tokens / sum(accounted.values()) if cat == "effective" else None
            self.emit(self.buffer, "goodput", category=cat, tokens=tokens, samples=tokens // 150, effective_ratio=ratio)
        for rec, phase in ((t0, "train"), (self.trainers[1], "train"), (self.gen, "generate"),
                           (self.grader, "grade"), (self.buffer, "idle")):
            rec.heartbeat(phase)
            self.emitted.append(("heartbeat", {"phase": phase}))
        if bad:
            if step == self.onset:
                for fault in ("staleness_blowup", "weight_sync_mismatch", "grad_nan", "slow_grader"):
                    self.emit(t0, "incident", fault=fault, onset_step=step, magnitude=1.0, detail="injected")
            for _ in range(INVALID_EVENTS_PER_STEP):  # a probe with a bug: the recorder drops and counts these
                t0.emit("train_step", loss="not-a-number")
                self.invalid_sent += 1
        if bad and step >= self.onset + 2:  # every fault pattern has shown by then
            self.feed_uncovered()

    def weight_sync(self, step: int, bad: bool) -> None:
        r, nbytes = self.rng, 512 << 20
        tr, gen = self.trainers[0], self.gen
        torn = bad and step % 3 == 0
        for b in BOUNDARIES:
            rec = tr if b in ("dump", "staging") else gen
            dur = {"dump": 0.4, "staging": 0.2, "transfer": 45.0 if bad else 1.2, "load": 0.8, "cache_reset": 0.05}[b]
            extra: dict[str, Any] = {}
            outcome = "ok"
            if b == "dump":
                extra = dict(tensors_expected=290, tensors_present=290, fingerprint="fp-a")
            elif b == "staging":
                extra = dict(lock_wait_s=r.uniform(0.001, 0.05), lock_hold_s=0.15, seq_before=2 * step,
                             seq_after=2 * step + (1 if torn else 0), torn=torn)
                outcome = "torn" if torn else "ok"
            elif b == "transfer":
                extra = dict(bandwidth_bps=nbytes / dur, retries=1 if bad else 0)
            elif b == "load":
                extra = dict(tensors_expected=290, tensors_present=290, fingerprint="fp-b" if bad else "fp-a",
                             fingerprint_match=not bad, mem_hwm_bytes=3 << 30,
                             mismatched_tensors=json.dumps(["lm_head.weight"] if bad else []))
                outcome = "mismatch" if bad else "ok"
            else:
                extra = dict(reset_requested=True, reset_confirmed=not bad, inflight_aborted=2, inflight_resumed=0)
            self.emit(rec, "weight_sync", version=step, boundary=b, start_ns=time.time_ns(), duration_s=dur,
                      bytes=nbytes if b != "cache_reset" else 0, outcome=outcome, **extra)
        self.emit(gen, "weight_sync", version=step, boundary="end_to_end", start_ns=time.time_ns(),
                  duration_s=47.0 if bad else 2.8, outcome="ok")

    # ---- catalogue metrics nobody fed realistically (e.g. appended later) ----
    def feed_uncovered(self) -> None:
        if not hasattr(self, "_uncovered"):
            self._uncovered = [m for m in METRICS if m.source is not None and not self._fed(m)]
            self.synthetic = [m.name for m in self._uncovered]
        for spec in self._uncovered:
            assert spec.source is not None
            fields = {f.name: _sample_value(f.type) for f in KINDS[spec.source.kind].fields}
            fields.update(spec.source.example_where())
            self.emit(self.trainers[0], spec.source.kind, **fields)

    def _fed(self, spec: MetricSpec) -> bool:
        src = spec.source
        assert src is not None
        for kind, fields in self.emitted:
            if kind != src.kind or not src.matches(fields):
                continue
            if src.field is None or src.field in ("ts_ns", "mono_ns", "step", "policy_version") \
                    or fields.get(src.field) is not None:
                return True
        return False

    def close(self) -> dict[str, Any]:
        stats = {}
        for rec in self.recorders:
            rec.flush()
            stats[rec.info.process if hasattr(rec, "info") else str(id(rec))] = rec.stats()
            rec.close()
        return stats


def _sample_value(type_: str) -> Any:
    return {"int32": 1, "int64": 1, "float64": 1.0, "float32": 1.0, "string": "synthetic", "bool": True,
            "list<float32>": [0.0], "list<int32>": [0]}[type_]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--faults", action="store_true")
    ap.add_argument("--onset", type=int, default=2, help="first faulty step")
    ap.add_argument("--period", type=float, default=0.5, help="seconds per step")
    ap.add_argument("--seconds", type=float, default=120.0, help="stop after this long")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    run = Run(args.run_dir, args.run_id, args.faults, args.onset, args.period, args.seed)
    deadline = time.monotonic() + args.seconds
    step = 0
    while not stop["now"] and time.monotonic() < deadline:
        run.step(step)
        if step == (args.onset + 2 if args.faults else 0):
            (args.run_dir / "synthetic_metrics.json").write_text(json.dumps(run.synthetic))
            report({"ready": True, "urls": [r.metrics_url for r in run.recorders]})
        step += 1
        time.sleep(args.period)
    stats = run.close()
    dropped = {k: v["dropped"] for k, v in stats.items() if v["dropped_total"]}
    summary = {"steps": step, "invalid_sent": run.invalid_sent,
               "dropped_total": sum(v["dropped_total"] for v in stats.values()),
               "dropped": {k: {f"{a}/{b}": n for (a, b), n in d.items()} for k, d in dropped.items()}}
    (args.run_dir / "emit_summary.json").write_text(json.dumps(summary, sort_keys=True))
    report(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
