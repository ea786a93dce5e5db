"""Fault injection for the reference trainer: one named fault, its onset step and magnitude.

``Config.fault`` names the fault (empty: none), ``fault_onset`` the first step it affects and
``fault_magnitude`` its strength (meaning per fault below; 0 picks the default). Every process
(driver, trainer, generator, grader actors) builds the same ``Fault`` from the config dict and the
hooks below are called at the real places in trainer_ref, one line each: they change what the
run really does (NaN loss, torn staging read, skipped cache reset, blocked grader call...), they
never emit fake telemetry. The driver declares the fault with an ``incident`` event.

Faults (names match ``tests/doctor/scenarios.py`` FAULTS):

* staleness_blowup: from onset the staleness bound is off (max_staleness ignored, admission up to
  the queue capacity) and the trainer sleeps ``magnitude`` s per step, so the generator runs ahead.
* resume_staleness_jump: on resume the restored policy is not pushed to the fresh engine (it keeps
  serving v0 at version 0) and the bound is off for ``magnitude`` steps: old-version rollouts are trained on.
* resume_skip / resume_repeat: on resume the data cursor is restored ``magnitude`` steps ahead /
  behind (with the ledger of those prompts forgotten): prompts are skipped / consumed twice.
* zero_std: the grader returns a constant reward for 7 of 8 prompts.  near_zero_std: all-equal groups
  get ``magnitude`` (1e-7) reward noise on one sample, so their std is just above 0.
* nan_grad: the loss is multiplied by NaN at the onset step.  grad_spike: at the onset step the gradient is
  scaled (after backward, before clipping) to ``magnitude`` x the median pre-clip norm of the steps before it,
  the doctor's own yardstick, so a rung of the ladder means the same ratio in every run (scaling the loss
  instead made it a multiple of that step's own norm, which varies 10x from step to step).
* incomplete_dump: ``model.norm.weight`` is left out of the dump.  torn_read: a writer rewrites the
  staging buffer (with the previous version) while it is read without the lock.  slow_transfer: the
  object-store put sleeps ``magnitude`` s.  fingerprint_mismatch: one weight is perturbed at load in the
  engine.  cache_not_reset: the prefix-cache reset is skipped.
* slow_grader: each grader call sleeps ``magnitude`` s.  hung_grader: one call in 8 blocks for
  ``magnitude`` x the grader timeout.  generator_starvation: the engine sleeps ``magnitude`` s per step.
* sampling_mismatch: the generator samples at temperature x ``magnitude`` (and its sampling hash says so).
* grader_crash (chaos only, not in ``FAULTS`` / the doctor's table): a grader process dies
  (``os._exit``) whenever it grades a sample of prompt ``p<magnitude>`` (default ``p20``): every
  re-grading of that group kills its grader again until the orchestrator gives up
  (``MAX_GRADE_ATTEMPTS``) and drops the groups of that grading call with reason ``grader_error``.
* rank_disagree (needs ``--dp 2`` or more): from onset, ranks other than 0 divide their loss by their
  *local* token count instead of the all-reduced global one (the all-reduce still runs, its result is
  ignored), the classic per-rank normalisation bug: gradients are scaled differently per rank.
"""

from __future__ import annotations

import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

DEFAULT_MAGNITUDE: dict[str, float] = {
    "staleness_blowup": 2.0, "resume_staleness_jump": 3.0, "resume_skip": 2.0, "resume_repeat": 2.0,
    "zero_std": 0.0, "near_zero_std": 1e-7, "nan_grad": 1.0, "grad_spike": 50.0, "incomplete_dump": 1.0,
    "torn_read": 1.0, "slow_transfer": 0.5, "fingerprint_mismatch": 1e-2, "cache_not_reset": 1.0,
    "slow_grader": 0.4, "hung_grader": 4.0, "generator_starvation": 0.15, "sampling_mismatch": 2.0,
    "rank_disagree": 1.0,
}
RESUME = ("resume_staleness_jump", "resume_skip", "resume_repeat")
NEEDS_DP = ("rank_disagree",)  # faults that need data-parallel trainer ranks (Config.dp >= 2)
FAULTS = tuple(DEFAULT_MAGNITUDE)
# chaos-only faults: accepted by from_config but not in FAULTS (no doctor finding expected, not in doctor_eval)
CHAOS_MAGNITUDE: dict[str, float] = {"grader_crash": 20.0}


@dataclass(frozen=True)
class Fault:
    name: str = ""
    onset: int = 0
    magnitude: float = 0.0

    def on(self, name: str, step: int | None = None) -> bool:
        """This fault is ``name`` and active at ``step`` (None: any step)."""
        return self.name == name and (step is None or step >= self.onset)


NONE = Fault()


def from_config(cfg: Any) -> Fault:
    """The fault of a Config or its dict (``fault``, ``fault_onset``, ``fault_magnitude``)."""
    get = cfg.get if isinstance(cfg, Mapping) else (lambda k, d=None: getattr(cfg, k, d))
    name = str(get("fault", "") or "")
    if not name:
        return NONE
    if name in NEEDS_DP and int(get("dp", 1) or 1) < 2:
        raise ValueError(f"fault {name!r} needs data-parallel trainer ranks: run with --dp 2 (or more)")
    if name not in DEFAULT_MAGNITUDE and name not in CHAOS_MAGNITUDE:
        raise ValueError(f"unknown fault {name!r}; valid: {', '.join((*FAULTS, *CHAOS_MAGNITUDE))}")
    mag = float(get("fault_magnitude", 0.0) or 0.0) or {**DEFAULT_MAGNITUDE, **CHAOS_MAGNITUDE}[name]
    return Fault(name, int(get("fault_onset", 0) or 0), mag)


def declare(f: Fault, resumed_step: int | None = None) -> None:
    """Driver: an ``incident`` event naming the fault (resume faults: only in the resumed run, onset = resume step)."""
    if not f.name or (f.name in RESUME and resumed_step is None):
        return
    import rlobs

    onset = resumed_step if f.name in RESUME else f.onset
    rlobs.get_recorder().emit("incident", fault=f.name, onset_step=int(onset), magnitude=f.magnitude,
                              detail="injected by trainer_ref.faults")


# ----- driver (orchestrator) ----------------------------------------------------------------------
def max_staleness(f: Fault, step: int, bound: int) -> int:
    """The staleness bound in force at ``step`` (off: a huge bound)."""
    if f.on("staleness_blowup", step) or (f.on("resume_staleness_jump") and f.onset <= step < f.onset + f.magnitude):
        return 1 << 30
    return bound


def max_outstanding(f: Fault, step: int, normal: int, capacity: int) -> int:
    """Admission limit of dispatched-but-unconsumed groups (the bound off: the queue capacity)."""
    return max(normal, capacity) if f.on("staleness_blowup", step) else normal


def resume_state(f: Fault, st: dict[str, Any], groups_per_step: int) -> dict[str, Any]:
    """Restored driver state; resume_skip/resume_repeat move the data cursor (repeat: the ledger,
    consumed list and buffer of the replayed prompts are restored from 'before' them as well)."""
    if f.name not in ("resume_skip", "resume_repeat"):
        return st
    shift = int(f.magnitude) * groups_per_step
    st = dict(st)
    if f.name == "resume_skip":
        st["cursor"] = st["cursor"] + shift
        return st
    # the cursor goes back to before the last ``shift`` consumed groups: consumed prompts are replayed
    consumed = sorted(int(g[1:]) for g in st["consumed_groups"] if g[1:].isdigit())
    cur = consumed[-shift] if len(consumed) >= shift else 0
    replay = {f"p{i}" for i in range(cur, st["cursor"])}
    st["cursor"] = cur
    st["ledger"] = {k: v for k, v in st["ledger"].items() if k.rsplit("-s", 1)[0] not in replay}
    st["consumed_groups"] = [g for g in st["consumed_groups"] if g not in replay]
    st["buffer"] = [g for g in st["buffer"] if g["group_id"] not in replay]
    return st


def push_weights_on_resume(f: Fault) -> bool:
    """resume_staleness_jump: the restored policy is not pushed to the engine."""
    return f.name != "resume_staleness_jump"


def tolerate_mismatch(f: Fault) -> bool:
    """Sync-correctness faults keep the run going past a fingerprint mismatch (the doctor must find it)."""
    return f.name in ("incomplete_dump", "torn_read", "fingerprint_mismatch")


# ----- trainer --------------------------------------------------------------------------------------
def scale_loss(f: Fault, step: int, loss: Any) -> Any:
    """nan_grad: the loss at the onset step times NaN (before backward)."""
    if step == f.onset and f.name == "nan_grad":
        return loss * float("nan")
    return loss


def spike_grads(f: Fault, step: int, params: Any, recent_norms: Iterable[float]) -> None:
    """grad_spike: scale the onset step's gradient (all-reduced, before clipping) so its norm is ``magnitude`` x
    the median of ``recent_norms`` (the pre-clip norms of the steps before; its own norm when there are none).
    A step without gradient (every group zero-std) stays without: there is nothing to scale."""
    if step != f.onset or f.name != "grad_spike":
        return
    import math
    import statistics

    import torch

    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    now = float(torch.nn.utils.get_total_norm(grads))
    before = [n for n in recent_norms if math.isfinite(n) and n > 0]
    base = statistics.median(before) if before else now
    if now > 0:
        for g in grads:
            g.mul_(f.magnitude * base / now)


def token_denominator(f: Fault, step: int, rank: int, local_tokens: float,
                      all_reduce_sum: Callable[[float], float]) -> float:
    """The token count this rank divides its loss by: the global (all-reduced) one; rank_disagree: a
    rank > 0 keeps its local count from the onset (every rank still joins the collective)."""
    total = all_reduce_sum(local_tokens)
    return local_tokens if (rank > 0 and f.on("rank_disagree", step)) else total


def slow_trainer(f: Fault, step: int) -> None:
    if f.on("staleness_blowup", step):
        time.sleep(f.magnitude)


def dump(f: Fault, step: int, d: Any, layout: Any) -> Any:
    """incomplete_dump: the dump without ``model.norm.weight`` (``layout``: the trainer's
    ``weight_sync.EngineLayout``)."""
    if not f.on("incomplete_dump", step):
        return d
    from trainer_ref import weight_sync

    state = {k: v for k, v in d.state.items() if k != "model.norm.weight"}
    fps, shapes = weight_sync.fingerprint_state(state, layout, d.kind)
    return weight_sync.Dump(d.version, state, fps, sorted(state), d.seconds, shapes, d.kind)


def staging_read(f: Fault, step: int, staging: Any, current: Any, previous: Any, locked: bool = True) -> Any:
    """The staging buffer's seqlock read (zero-copy: the engine maps the buffer). torn_read: a second
    writer rewrites the buffer (previous, then current version) while the trainer reads it without the
    lock; the first torn read is returned. The writer ends on the current version."""
    if not f.on("torn_read", step) or previous is None:
        return staging.read(use_lock=locked, copy=False)
    stop, started = threading.Event(), threading.Event()

    def writer() -> None:
        while not stop.is_set():
            started.set()
            staging.write(previous.state, previous.version)
            staging.write(current.state, current.version)

    th = threading.Thread(target=writer, daemon=True, name="fault-torn-writer")
    th.start()
    started.wait(5)
    try:
        for _ in range(500):  # the unlocked reader copies tensor by tensor, yielding between them
            rd = staging.read(use_lock=False, per_tensor=lambda _n: time.sleep(0))
            if rd.torn:
                return rd
        return rd
    finally:
        stop.set()
        th.join()


def transfer(f: Fault, step: int, send: Callable[[bytes], tuple[Any, float]], payload: bytes) -> tuple[Any, float]:
    """slow_transfer: the put is delayed by ``magnitude`` s (timed as part of the transfer)."""
    if not f.on("slow_transfer", step):
        return send(payload)
    t0 = time.perf_counter()
    time.sleep(f.magnitude)
    ref, _ = send(payload)
    return ref, time.perf_counter() - t0


# ----- generator ----------------------------------------------------------------------------------
def generator_hashes(f: Fault, hashes: dict[str, str] | None, cfg: Mapping[str, Any]) -> dict[str, str] | None:
    """sampling_mismatch: the generator's manifest carries its real (different) sampling settings."""
    if f.name != "sampling_mismatch" or hashes is None:
        return hashes
    return {**hashes, "sampling": f"T={temperature(f, f.onset, float(cfg['temperature']))},max={cfg['max_tokens']}"}


def temperature(f: Fault, version: int, t: float) -> float:
    return t * f.magnitude if f.on("sampling_mismatch", version) else t


def corrupt_payload(f: Fault, step: int, payload: bytes) -> bytes:
    """fingerprint_mismatch: the engine loads ``model.norm.weight`` perturbed by +magnitude."""
    if not f.on("fingerprint_mismatch", step):
        return payload
    from safetensors.torch import load, save

    state = load(payload)
    if "model.norm.weight" in state:
        state["model.norm.weight"] = state["model.norm.weight"] + f.magnitude
    return save(state)


def corruption(f: Fault, step: int) -> dict[str, float]:
    """fingerprint_mismatch: {tensor: delta} the engine adds to what it loads (``model.norm.weight``)."""
    return {"model.norm.weight": float(f.magnitude)} if f.on("fingerprint_mismatch", step) else {}


def reset_cache(f: Fault, step: int, reset: Callable[[Any], bool], llm: Any) -> bool | None:
    """cache_not_reset: the prefix-cache reset is skipped (None: never requested)."""
    return None if f.on("cache_not_reset", step) else reset(llm)


def slow_generator(f: Fault, version: int) -> None:
    if f.on("generator_starvation", version):
        time.sleep(f.magnitude)


# ----- graders ------------------------------------------------------------------------------------
def _step_of(sample: Mapping[str, Any]) -> int:
    return int(sample.get("dispatch_version") or 0)


def grader_call(f: Fault, sample: Mapping[str, Any], timeout_s: float, step: int | None = None) -> None:
    """slow_grader: sleep ``magnitude`` s; hung_grader: one call in 8 blocks past the timeout;
    grader_crash: the process dies on a sample of the poison prompt. The onset counts trainer steps:
    ``step`` (the trainer step the grading was submitted at), else the sample's dispatch version."""
    at = _step_of(sample) if step is None else int(step)
    if f.name == "grader_crash" and str(sample.get("group_id")) == f"p{int(f.magnitude)}":
        import os

        os._exit(1)  # a grader that keeps dying on this input (segfaulting checker, OOM on one sample)
    if f.on("slow_grader", at):
        time.sleep(f.magnitude)
    elif f.on("hung_grader", at) and zlib.crc32(str(sample["sample_id"]).encode()) % 8 == 0:
        time.sleep(f.magnitude * timeout_s)


def rewards(f: Fault, samples: list[dict[str, Any]], out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """zero_std: constant reward for 7 prompts in 8; near_zero_std: noise on all-equal groups."""
    if f.name not in ("zero_std", "near_zero_std"):
        return out
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        if f.on(f.name, _step_of(s)) and out[i]["outcome"] == "ok":
            groups.setdefault(s["group_id"], []).append(i)
    for gid, idx in groups.items():
        if f.name == "zero_std" and zlib.crc32(gid.encode()) % 8 != 0:
            for i in idx:
                out[i]["reward"] = f.magnitude
        elif f.name == "near_zero_std" and len({out[i]["reward"] for i in idx}) == 1:
            out[idx[0]]["reward"] += f.magnitude
    return out


def sampling_cfg(f: Fault, cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """The generator's effective sampling settings (what its parity hashes describe)."""
    return {**cfg, "temperature": temperature(f, f.onset, float(cfg["temperature"]))} if f.name == "sampling_mismatch" else cfg


# What the doctor must answer for each fault: the top-1 rule id (== runbook name) and the most steps allowed
# from onset to the finding's first step (1 for NaN and sync-correctness faults, 3 for the rest). One table,
# read by the doctor's scenario tests and by bench/doctor_eval.
EXPECTED_FINDING: dict[str, tuple[str, int]] = {
    "staleness_blowup": ("staleness-over-bound", 3),
    "resume_staleness_jump": ("staleness-jump-after-resume", 3),
    "zero_std": ("advantage-zero-std-groups", 3),
    "near_zero_std": ("advantage-denominator-collapse", 3),
    "rank_disagree": ("advantage-rank-disagreement", 1),
    "nan_grad": ("grad-norm-nonfinite", 1),
    "grad_spike": ("grad-norm-spike", 1),
    "incomplete_dump": ("weight-sync-incomplete-dump", 1),
    "torn_read": ("weight-sync-torn-read", 1),
    "slow_transfer": ("weight-sync-slow", 3),
    "fingerprint_mismatch": ("weight-sync-fingerprint-mismatch", 1),
    "cache_not_reset": ("weight-sync-cache-not-reset", 1),
    "slow_grader": ("grader-slow", 3),
    "hung_grader": ("grader-hung", 3),
    "generator_starvation": ("trainer-starved", 3),
    "sampling_mismatch": ("parity-config-mismatch", 1),
    "resume_skip": ("ledger-samples-skipped", 3),
    "resume_repeat": ("ledger-samples-repeated", 3),
}
