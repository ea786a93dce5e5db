"""Small recorded scenarios for the doctor's tests: a healthy async GRPO run, and one run per fault.

Each scenario is written through the real recorder (one ``Recorder`` per simulated process: driver,
trainer, generator, grader) into a real run record, with seeded noise. It is small (16 steps, 16
samples per step) so that every rule can be checked in a fraction of a second; the same faults are
injected for real in ``trainer_ref`` by the evaluation harness.

    python -m tests.doctor.scenarios OUT_DIR     # write every scenario's record for inspection

``FAULTS`` maps a fault name to (expected top-1 rule, allowed onset-to-detection delay in steps).
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import rlobs
from trainer_ref.faults import EXPECTED_FINDING

STEPS = 16
ONSET = 8
GROUPS = 4
G = 4
BOUND = 2

# fault -> (expected top-1 rule id, max steps from onset to the finding's first step)
FAULTS: dict[str, tuple[str, int]] = EXPECTED_FINDING

HASHES = {"tokenizer": "tok-5f1e", "chat_template": "tpl-77aa", "sampling": "smp-0b3c"}


@dataclass
class _Procs:
    driver: rlobs.Recorder
    trainer: rlobs.Recorder
    generator: rlobs.Recorder
    grader: rlobs.Recorder

    def all(self) -> list[rlobs.Recorder]:
        return [self.driver, self.trainer, self.generator, self.grader]


def _init(run_dir: Path, component: str, config: dict, hashes: dict | None = None) -> rlobs.Recorder:
    return rlobs.init(run_dir, component=component, config=config, hashes=hashes or HASHES, prometheus=False,
                      set_global=False, flush_interval=3600)


def build(run_dir: Path, fault: str | None = None, seed: int = 0, sample_detail: bool = False) -> Path:
    """Write one scenario's record into ``run_dir`` and return it.

    ``sample_detail`` adds prompt/completion text and per-token log-probs to the rollouts and a
    ``parity_sample`` per consumed sample (trainer log-probs), from a separate RNG: every other event
    is identical with or without it."""
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; valid: {', '.join(FAULTS)}")
    rng = random.Random(seed)
    detail_rng = random.Random(seed * 7919 + 1)
    gen_logprobs: dict[str, list[float]] = {}
    config = {"mode": "separate_async", "max_staleness": None if fault == "staleness_blowup" else BOUND,
              "group_size": G, "groups_per_step": GROUPS, "fault": fault, "onset_step": ONSET}
    gen_hashes = dict(HASHES, sampling="smp-9999") if fault == "sampling_mismatch" else HASHES
    procs = _Procs(_init(run_dir, "driver", config), _init(run_dir, "trainer", config),
                   _init(run_dir, "generator", config, gen_hashes), _init(run_dir, "grader", config))
    if fault:
        procs.driver.emit("incident", fault=fault, onset_step=ONSET, magnitude=1.0, detail="scenario")
    prompt = 0
    consumed_prev: list[tuple[str, str]] = []
    seq = 0
    for step in range(STEPS):
        hot = fault is not None and step >= ONSET
        tr, gen, grd = procs.trainer, procs.generator, procs.grader
        if hot and step == ONSET and fault in ("resume_staleness_jump", "resume_skip", "resume_repeat"):
            tr.close()  # the trainer dies and a new process resumes from its checkpoint
            tr = procs.trainer = _init(run_dir, "trainer", config)
            if fault == "resume_skip":
                prompt += 2 * GROUPS  # the restored data cursor skips two steps' prompts
        for rec in procs.all():
            rec.set_step(step) if rec is not grd else None
            rec.set_policy_version(step)
        # --- the trainer starts the step (waits for data, then trains) ---
        wait = 0.1 * rng.uniform(0.8, 1.2)
        reward_wait = 0.02 * rng.uniform(0.8, 1.2)
        if hot and fault == "generator_starvation":
            wait *= 15
        if hot and fault == "slow_grader":
            reward_wait, wait = 1.0, 1.1
        # --- generation: one group per prompt ---
        rewards_by_group = []
        samples = []
        for g in range(GROUPS):
            gid = f"g{step}-{g}"
            pid = f"p{prompt}"
            prompt += 1
            base = rng.random() < 0.5
            rewards = [float(rng.random() < 0.5) if base else float(rng.random() < 0.3) for _ in range(G)]
            if hot and fault == "zero_std" and g < GROUPS:
                rewards = [rewards[0]] * G
            if hot and fault == "near_zero_std" and g == 0:
                rewards = [1.0, 1.0 + 1e-7, 1.0, 1.0]
            rewards_by_group.append(rewards)
            for i in range(G):
                sid = f"s{step}-{g}-{i}"
                stale = rng.choice([0, 1, 1, 2]) if step >= 2 else 0
                if hot and fault == "staleness_blowup":
                    stale = 2 + 2 * (step - ONSET + 1)
                if hot and fault == "resume_staleness_jump" and step < ONSET + 2:
                    stale = 6
                tokens = int(min(96, rng.lognormvariate(3.3, 0.6)))
                text = _sample_text(detail_rng, pid, tokens, sid, gen_logprobs) if sample_detail else {}
                gen.emit("rollout", sample_id=sid, group_id=gid, prompt_id=pid, dispatch_version=step - stale,
                         completion_tokens=tokens, prompt_tokens=12, finish_reason="length" if tokens >= 96 else "stop",
                         gen_seconds=rng.uniform(0.2, 0.6) * (15 if hot and fault == "generator_starvation" else 1), **text)
                gen.emit("ledger", sample_id=sid, group_id=gid, state="generated", tokens=tokens)
                latency = 0.05 * rng.uniform(0.7, 1.4)
                outcome = "ok"
                if hot and fault == "slow_grader":
                    latency *= 20
                if hot and fault == "hung_grader" and i == 0:
                    outcome, latency = "timeout", 5.0
                grd.emit("grader_call", sample_id=sid, grader_kind="rule", queue_wait_s=0.001, latency_s=latency,
                         outcome=outcome, reward=rewards[i] if outcome == "ok" else None)
                grd.emit("ledger", sample_id=sid, group_id=gid, state="graded", tokens=tokens)
                samples.append((sid, gid, stale, tokens))
        grd.emit("grader_inflight", grader_kind="rule", in_flight=2, deadline_s=10.0,
                 overdue=2 if hot and fault == "hung_grader" else 0,
                 oldest_age_s=25.0 if hot and fault == "hung_grader" else 0.1)
        # --- consumption ---
        if hot and fault == "resume_skip" and step == ONSET:
            samples = samples[: len(samples) // 2]  # in-flight rollouts lost at the resume
        for sid, gid, stale, tokens in samples:
            tr.emit("ledger", sample_id=sid, group_id=gid, state="consumed", staleness=stale, age_s=0.5, tokens=tokens)
            if sample_detail:
                off = 0.03 if hot and fault in ("cache_not_reset", "fingerprint_mismatch", "incomplete_dump", "torn_read") else 0.001
                gen_lp = gen_logprobs.pop(sid)
                train_lp = [x + detail_rng.choice((-1.0, 1.0)) * off * detail_rng.uniform(0.5, 1.5) for x in gen_lp]
                diffs = [abs(a - b) for a, b in zip(gen_lp, train_lp)]
                tr.emit("parity_sample", sample_id=sid, mean_abs_dlogp=sum(diffs) / len(diffs), max_abs_dlogp=max(diffs),
                        train_logprobs=train_lp)
        if hot and fault == "resume_repeat" and step == ONSET:
            for sid, gid in consumed_prev:
                tr.emit("ledger", sample_id=sid, group_id=gid, state="consumed", staleness=1, age_s=0.9)
        consumed_prev = [(s[0], s[1]) for s in samples]
        stales = [s[2] for s in samples]
        tr.emit("staleness", samples=len(samples), max_staleness=max(stales), mean_staleness=sum(stales) / len(stales),
                is_ratio_mean=1.0, is_ratio_max=1.3, is_clipped_ratio=0.0, ess_ratio=0.97)
        # --- advantages ---
        stds = [_std(r) for r in rewards_by_group]
        eps = 1e-6
        advs = [abs(x - sum(r) / len(r)) / (sd + eps) if sd > 0 else 0.0 for r, sd in zip(rewards_by_group, stds)
                for x in r]
        zero = sum(1 for sd in stds if sd == 0)
        near = sum(1 for sd in stds if 0 < sd < 1e-3)
        agree = not (hot and fault == "rank_disagree")
        tokens_sum = float(sum(s[3] for s in samples))
        tr.emit("advantage", groups=GROUPS, zero_std_groups=zero, near_zero_std_groups=near, near_zero_threshold=1e-3,
                zero_std_ratio=zero / GROUPS, near_zero_std_ratio=near / GROUPS, max_abs_advantage=max(advs),
                denom_min=min(sd + eps for sd in stds), denom_p50=sorted(sd + eps for sd in stds)[GROUPS // 2],
                denom_max=max(sd + eps for sd in stds), nonfinite_denominators=0, token_denominator=tokens_sum,
                ranks_agree=agree, rank_denominators=json.dumps([tokens_sum, tokens_sum - (0 if agree else 37)]))
        # --- the optimiser step ---
        gn = rng.lognormvariate(0.0, 0.15)
        if hot and fault == "near_zero_std":
            gn *= 400
        if fault == "grad_spike" and step == ONSET:
            gn *= 25
        nonfinite = fault == "nan_grad" and step == ONSET
        tr.emit("train_step", loss=0.5 + rng.gauss(0, 0.05), grad_norm=float("nan") if nonfinite else gn,
                grad_norm_clipped=min(gn, 1.0), clipped=gn > 1.0, nonfinite=nonfinite, lr=1e-4, samples=len(samples),
                tokens=int(tokens_sum), step_seconds=0.5 * rng.uniform(0.9, 1.1), data_wait_s=wait,
                reward_wait_s=reward_wait, reward_mean=sum(map(sum, rewards_by_group)) / (GROUPS * G))
        # --- parity of this batch (first batch after the previous sync) ---
        dlogp = 0.001 * rng.uniform(0.5, 1.5)
        if hot and fault in ("cache_not_reset", "fingerprint_mismatch", "incomplete_dump", "torn_read"):
            dlogp = 0.03
        if hot and fault == "sampling_mismatch":
            dlogp = 0.02
        tr.emit("parity", tokens=int(tokens_sum), mean_abs_dlogp=dlogp, max_abs_dlogp=dlogp * 8, kl_k3=dlogp ** 2 / 2,
                first_after_sync=True, hashes_match=not (hot and fault == "sampling_mismatch"),
                mismatched_hashes=json.dumps(["sampling"]) if hot and fault == "sampling_mismatch" else None)
        # --- weight sync of the new version, five boundaries ---
        v = step + 1
        present = 9 if hot and fault == "incomplete_dump" else 10
        tr.emit("weight_sync", version=v, boundary="dump", duration_s=0.01, bytes=4_000_000, outcome="ok",
                tensors_expected=10, tensors_present=present,
                missing_tensors=json.dumps(["lm_head.weight"]) if present < 10 else None)
        torn = fault == "torn_read" and step == ONSET
        gen.emit("weight_sync", version=v, boundary="staging", duration_s=0.002, bytes=4_000_000,
                 outcome="torn" if torn else "ok", lock_wait_s=0.0001, lock_hold_s=0.001, seq_before=seq,
                 seq_after=seq + 1 if torn else seq, torn=torn)
        seq += 2
        transfer = 0.02 * rng.uniform(0.8, 1.25)
        if hot and fault == "slow_transfer":
            transfer *= 25
        gen.emit("weight_sync", version=v, boundary="transfer", duration_s=transfer, bytes=4_000_000, outcome="ok",
                 bandwidth_bps=4_000_000 / transfer, retries=0)
        match = not (hot and fault in ("fingerprint_mismatch", "incomplete_dump") or torn)
        gen.emit("weight_sync", version=v, boundary="load", duration_s=0.02, bytes=4_000_000,
                 outcome="ok" if match else "mismatch", tensors_expected=10, tensors_present=present,
                 fingerprint_match=match, mismatched_tensors=None if match else json.dumps(["lm_head.weight"]),
                 mem_hwm_bytes=900_000_000)
        reset = not (hot and fault == "cache_not_reset")
        gen.emit("weight_sync", version=v, boundary="cache_reset", duration_s=0.001, outcome="ok" if reset else "skipped",
                 reset_requested=reset, reset_confirmed=reset, inflight_aborted=0, inflight_resumed=1)
        gen.emit("weight_sync", version=v, boundary="end_to_end", duration_s=0.06 + transfer, outcome="ok")
        for rec, phase in ((tr, "train"), (gen, "generate"), (grd, "grade")):
            rec.heartbeat(phase)
        gen.emit("throughput", window_s=1.0, samples=16, samples_per_s=16.0, tokens_per_s=500.0,
                 effective_samples_per_s=15.0, idle_ratio=0.1, predicted_staleness=1.0)
        gen.emit("queue", queue="rollouts", depth=4, capacity=32, oldest_age_s=0.4)
        for rec in procs.all():
            rec.flush()
        time.sleep(0.002)  # distinct wall-clock steps for the ASOF joins
    for rec in procs.all():
        rec.close()
    return run_dir


def _sample_text(rng: random.Random, prompt_id: str, tokens: int, sid: str,
                 store: dict[str, list[float]]) -> dict[str, object]:
    """Prompt, completion and generator log-probs of one sample (``tokens`` log-probs)."""
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    words = ["Let", "me", "add", str(a), "and", str(b), "step", "by", "step", "."]
    body = " ".join(words[i % len(words)] for i in range(max(tokens - 4, 0)))
    logprobs = [-abs(rng.gauss(0.4, 0.5)) for _ in range(tokens)]
    store[sid] = logprobs
    return {"prompt": f"[{prompt_id}] What is {a} + {b}? Answer with a number.",
            "completion": f"{body} The answer is {a + b}.", "logprobs": logprobs}


def _std(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "scenarios")
    for name in ["healthy", *FAULTS]:
        build(out / name, None if name == "healthy" else name)
        print(out / name)
