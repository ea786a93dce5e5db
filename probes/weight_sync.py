"""Weight sync, five boundaries: each a timed, verified span per policy version (DESIGN.md §2.4).

    probe = WeightSyncProbe()
    with probe.sync(version, optimizer_step_ns=t_step) as s:           # span "weight_sync"
        with s.dump(expected=names) as b:                              # 1. trainer-side dump
            state = model.state_dict(); b.record_state(state)          #    bytes, presence, fingerprints
        staged = s.read_staging(buffer)                                # 2. StagingBuffer: lock, seq, torn
        with s.transfer() as b: send(staged); b.bytes = nbytes         # 3. bytes, seconds, bandwidth
        with s.load() as b: engine.load(staged); b.record_state(engine_state)  # 4. compare, memory HWM
        with s.cache_reset() as b:                                     # 5. requested AND confirmed
            b.requested(); b.confirmed(engine.reset_prefix_cache()); b.inflight(aborted=3)
    # exit: an ``end_to_end`` event, duration = optimiser step -> generator serving the version

Across processes (trainer dumps, generator loads): the trainer uses
``WeightSyncProbe(required=("dump",))`` and ``sync(v, end_to_end=False)``, and sends ``s.handoff()``
(plain JSON) with the weights; the generator uses ``WeightSyncProbe(required=("load", "cache_reset"))``
and ``sync(handoff=received)``: its ``load`` compares with the trainer's dump fingerprints, its spans
join the trainer's trace, and it emits the end-to-end lag.

Every boundary emits one ``weight_sync`` event inside a child span ``weight_sync.<boundary>``.
Outcomes: ``ok``; ``error`` (the block raised; the exception propagates); ``mismatch`` (dump: an
expected tensor is missing; load: a fingerprint differs from the dump's or a tensor is missing);
``torn`` (staging read overlapped a write); ``skipped`` (cache reset not requested or not confirmed,
or a required boundary never ran in this sync: emitted at the end so a forgotten cache reset shows).

Fingerprints (``probes.fingerprint``): xxh3-64 over dtype, shape and raw bytes of each tensor (torch
tensors, bfloat16 included, and numpy arrays), about 60-140 us per MiB on these CPUs; GPU tensors are
copied to the host to hash them, 1-3 GB/s on an H200 machine (15 s for an 8B model). On a GPU use
``WeightSyncProbe(fingerprint_kind="device")`` on both sides: a checksum of every byte computed on the device
(0.09 s for the same 8B model, ``bench/gpu_sync_cost.py``). Or sample
(``WeightSyncProbe(fingerprint_max_bytes=64 << 10)``: evenly spaced 4 KiB blocks, sliced on the device
first) or fingerprint a subset (``record_state(state, names=...)``).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Iterable, Iterator, Mapping

from probes._common import Recorderish, dumps, recorder_or_global
from probes.fingerprint import (  # noqa: F401
    combined_fingerprint,
    compare_fingerprints,
    fingerprints,
    tensor_fingerprint,  # tensor_fingerprint: re-exported
    tensor_nbytes,
)
from probes.staging import HEADER_BYTES, StagingBuffer, StagingRead, views  # noqa: F401 - re-exported

BOUNDARIES = ("dump", "staging", "transfer", "load", "cache_reset")
DEFAULT_REQUIRED = ("dump", "load", "cache_reset")


# ---- staging buffer: probes.staging (re-exported) ----------------------------------------------


# ---- memory -------------------------------------------------------------------------------------
def memory_high_water_bytes(device: Any = None) -> int:
    """Peak memory: ``torch.cuda.max_memory_allocated`` when torch is loaded and CUDA is in use,
    else the process's peak RSS (``getrusage`` ru_maxrss)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def _reset_peak(device: Any = None) -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats(device)


# ---- boundaries ---------------------------------------------------------------------------------
class Boundary:
    """An open boundary. Set event fields as attributes before it ends (``bytes``, ``retries``,
    ``tensors_expected``, ``tensors_present``, ``mem_hwm_bytes``, ``inflight_aborted``,
    ``inflight_resumed``, ``bandwidth_bps`` (default: bytes / duration), ``path`` (the transfer path:
    shm | object_store | cuda_ipc | nccl), staging ``lock_wait_s`` / ``lock_hold_s`` / ``seq_before`` /
    ``seq_after`` / ``torn``) or call the helpers (``record_state``, ``record_read``, ``requested``,
    ``confirmed``, ``inflight``)."""

    def __init__(self, session: "SyncSession", name: str):
        self.session = session
        self.name = name
        self.fields: dict[str, Any] = {}
        self.outcome: str | None = None  # None: decided at exit
        self.error: str | None = None
        self.start_ns = time.time_ns()
        self._t0 = time.perf_counter()

    def __setattr__(self, key: str, value: Any) -> None:
        if key in ("bytes", "retries", "tensors_expected", "tensors_present", "mem_hwm_bytes",
                   "inflight_aborted", "inflight_resumed", "lock_wait_s", "lock_hold_s", "seq_before",
                   "seq_after", "torn", "bandwidth_bps", "path"):
            self.fields[key] = value
        else:
            object.__setattr__(self, key, value)

    def record_state(self, state: Mapping[str, Any], *, expected: Iterable[str] | None = None,
                     names: Iterable[str] | None = None) -> dict[str, str]:
        """Fingerprint ``state`` (or ``names`` of it). At ``dump`` the result is kept as the reference;
        at ``load`` it is compared with the dump's (mismatched and missing tensors listed)."""
        probe = self.session.probe
        fps = fingerprints(state, names, probe.fingerprint_max_bytes, probe.fingerprint_kind)
        nbytes = self.fields.get("bytes") or sum(tensor_nbytes(state[k]) for k in fps)
        if expected is None and names is not None and self.name == "dump" and self.session.expected is None:
            expected = list(names)  # the names asked for are the ones expected
        self.record_fingerprints(fps, expected=expected, present=list(state), nbytes=nbytes, subset=names is not None)
        return fps

    def record_fingerprints(self, fps: Mapping[str, str], *, expected: Iterable[str] | None = None,
                            present: Iterable[str] | None = None, nbytes: int | None = None,
                            subset: bool = False) -> None:
        """Like ``record_state`` for fingerprints computed elsewhere (``probes.fingerprint`` in another
        process, e.g. inside an inference engine's workers, which returns only the digests).
        present: tensor names that exist (default: the keys of ``fps``); subset: ``fps`` covers only
        some of the tensors, so only those are compared with the dump."""
        fps = dict(fps)
        exp = list(expected) if expected is not None else self.session.expected
        have = set(fps) if present is None else set(present) | set(fps)
        if nbytes is not None:
            self.fields["bytes"] = self.fields.get("bytes") or int(nbytes)
        self.fields["fingerprint"] = combined_fingerprint(fps)
        if self.name == "dump":
            self.session.dump_fingerprints = fps
            if exp is None:
                exp = list(fps)
                self.session.expected = exp
        missing: set[str] = set()
        if self.name == "load" and self.session.dump_fingerprints is not None:
            ref = self.session.dump_fingerprints
            if subset:  # only the fingerprinted subset can be compared
                ref = {k: v for k, v in ref.items() if k in fps or k not in have}
            mismatched, missing_ref = compare_fingerprints(ref, fps)
            missing.update(missing_ref)
            self.fields["fingerprint_match"] = not mismatched and not missing_ref
            self.fields["mismatched_tensors"] = dumps(mismatched)
            if mismatched:
                self.outcome = "mismatch"
        if exp is not None:
            present_exp = [k for k in exp if k in have]
            missing.update(set(exp) - set(present_exp))
            self.fields["tensors_expected"] = len(exp)
            self.fields["tensors_present"] = len(present_exp)
        if exp is not None or missing:
            self.fields["missing_tensors"] = dumps(sorted(missing))
        if missing:
            self.outcome = "mismatch"

    def add_seconds(self, seconds: float) -> None:
        """Time this boundary spent in another process before this side's block (e.g. the sender's
        half of a two-sided transfer, taken from the handoff): added to the duration, start moved back."""
        self.extra_s = getattr(self, "extra_s", 0.0) + max(0.0, float(seconds))

    # staging
    def record_read(self, r: Any, nbytes: int | None = None) -> None:
        """A staging read: ``StagingRead`` or any object with the same sequence / lock / torn fields
        (``nbytes`` then gives its size)."""
        if nbytes is None:
            nbytes = sum(int(a.nbytes) for a in r.payload.values())
        self.fields.update(lock_wait_s=r.lock_wait_s, lock_hold_s=r.lock_hold_s, seq_before=r.seq_before,
                           seq_after=r.seq_after, torn=r.torn, bytes=int(nbytes))
        if r.torn:
            self.outcome = "torn"

    # cache reset
    def requested(self) -> None:
        self.fields["reset_requested"] = True

    def confirmed(self, ok: Any = True) -> None:
        """The engine's answer to the reset (truthy = confirmed)."""
        self.fields["reset_confirmed"] = bool(ok)

    def inflight(self, *, aborted: int = 0, resumed: int = 0) -> None:
        self.fields["inflight_aborted"] = int(aborted)
        self.fields["inflight_resumed"] = int(resumed)

    def _finish(self, failed: BaseException | None) -> dict[str, Any]:
        extra = getattr(self, "extra_s", 0.0)
        duration = time.perf_counter() - self._t0 + extra
        f = dict(self.fields)
        if self.name != "cache_reset" and f.get("bytes") is not None and "bandwidth_bps" not in f and duration > 0:
            f["bandwidth_bps"] = float(f["bytes"]) / duration
        if self.name == "load" and "mem_hwm_bytes" not in f:
            f["mem_hwm_bytes"] = memory_high_water_bytes()
        if self.name == "cache_reset":
            f.setdefault("reset_requested", False)
            f.setdefault("reset_confirmed", False)
        outcome = self.outcome
        if failed is not None:
            outcome = "error"
            f["error"] = f"{type(failed).__name__}: {failed}"
        elif outcome is None:
            if self.name == "cache_reset" and not (f["reset_requested"] and f["reset_confirmed"]):
                outcome = "skipped"
            else:
                outcome = "ok"
        f.update(boundary=self.name, start_ns=self.start_ns - int(extra * 1e9), duration_s=duration, outcome=outcome)
        return _plain(f)


_INT_FIELDS = frozenset({"bytes", "retries", "tensors_expected", "tensors_present", "mem_hwm_bytes",
                         "inflight_aborted", "inflight_resumed", "seq_before", "seq_after"})
_FLOAT_FIELDS = frozenset({"lock_wait_s", "lock_hold_s", "bandwidth_bps"})


def _plain(f: dict[str, Any]) -> dict[str, Any]:
    """Caller-set values (numpy / torch scalars) as the plain types the schema wants."""
    for k, v in f.items():
        if v is None:
            continue
        if k in _INT_FIELDS:
            f[k] = int(v)
        elif k in _FLOAT_FIELDS:
            f[k] = float(v)
        elif k == "torn":
            f[k] = bool(v)
    return f


class SyncSession:
    """One weight sync of one version; see the module docstring."""

    def __init__(self, probe: "WeightSyncProbe", version: int, optimizer_step_ns: int | None,
                 expected: Iterable[str] | None, required: tuple[str, ...]):
        self.probe = probe
        self.version = int(version)
        self.optimizer_step_ns = optimizer_step_ns
        self.expected = list(expected) if expected is not None else None
        self.required = required
        self.dump_fingerprints: dict[str, str] | None = None
        self.results: dict[str, dict[str, Any]] = {}
        self.start_ns = time.time_ns()
        self.serving_ns: int | None = None
        self.traceparent: str | None = None

    @property
    def rec(self) -> Recorderish:
        return recorder_or_global(self.probe._recorder)

    @contextmanager
    def boundary(self, name: str) -> Iterator[Boundary]:
        if name not in BOUNDARIES:
            raise ValueError(f"unknown boundary {name!r}; valid: {', '.join(BOUNDARIES)}")
        rec = self.rec
        with rec.span(f"weight_sync.{name}", version=self.version) as sp:
            b = Boundary(self, name)
            failed: BaseException | None = None
            try:
                yield b
            except BaseException as exc:
                failed = exc
                raise
            finally:
                f = b._finish(failed)
                self.results[name] = f
                sp.set("outcome", f["outcome"])
                if f["outcome"] == "error":
                    sp.fail()
                rec.emit("weight_sync", version=self.version, **f)

    def dump(self, *, expected: Iterable[str] | None = None) -> AbstractContextManager[Boundary]:
        if expected is not None:
            self.expected = list(expected)
        return self.boundary("dump")

    def staging(self) -> AbstractContextManager[Boundary]:
        return self.boundary("staging")

    def transfer(self) -> AbstractContextManager[Boundary]:
        return self.boundary("transfer")

    def load(self) -> AbstractContextManager[Boundary]:
        _reset_peak()
        return self.boundary("load")

    def cache_reset(self) -> AbstractContextManager[Boundary]:
        return self.boundary("cache_reset")

    def read_staging(self, buffer: StagingBuffer, *, use_lock: bool = True) -> dict[str, Any]:
        """Boundary 2 in one call: read ``buffer`` and record lock timing, sequence numbers, torn."""
        with self.boundary("staging") as b:
            r = buffer.read(use_lock=use_lock)
            b.record_read(r)
        return r.payload

    def serving(self) -> None:
        """Mark the moment the generator serves this version (default: the end of the sync)."""
        self.serving_ns = time.time_ns()

    def handoff(self) -> dict[str, Any]:
        """What the trainer sends along with the weights so the generator's process can verify its load
        and close the end-to-end lag: plain JSON (version, optimiser-step time, expected tensor names,
        per-tensor dump fingerprints, the W3C traceparent of this sync's span)."""
        return {"version": self.version, "optimizer_step_ns": self.optimizer_step_ns or self.start_ns,
                "expected": self.expected, "fingerprints": self.dump_fingerprints,
                "traceparent": self.traceparent}


class WeightSyncProbe:
    """Creates ``SyncSession``s; keeps the last end-to-end lag and outcomes.

    required: boundaries that must run in every sync; a missing one is emitted as ``skipped``.
    fingerprint_max_bytes: sample at most this many bytes per tensor when fingerprinting (see
        ``tensor_fingerprint``); both sides of a comparison must use the same value.
    fingerprint_kind: ``bytes`` (hashed on the host) or ``device`` (a checksum computed where the tensors live:
        GPU weights); both sides of a comparison must use the same kind.
    """

    def __init__(self, recorder: Recorderish | None = None, *, required: Iterable[str] = DEFAULT_REQUIRED,
                 fingerprint_max_bytes: int | None = None, fingerprint_kind: str = "bytes"):
        from probes.fingerprint import KINDS

        if fingerprint_kind not in KINDS:
            raise ValueError(f"fingerprint_kind {fingerprint_kind!r}; valid: {', '.join(KINDS)}")
        self._recorder = recorder
        self.fingerprint_max_bytes = fingerprint_max_bytes
        self.fingerprint_kind = fingerprint_kind
        self.required = tuple(required)
        bad = set(self.required) - set(BOUNDARIES)
        if bad:
            raise ValueError(f"unknown boundaries {sorted(bad)}; valid: {', '.join(BOUNDARIES)}")
        self.last: SyncSession | None = None

    @contextmanager
    def sync(self, version: int | None = None, *, optimizer_step_ns: int | None = None,
             expected: Iterable[str] | None = None, handoff: Mapping[str, Any] | None = None,
             end_to_end: bool = True) -> Iterator[SyncSession]:
        """One sync of ``version``. ``optimizer_step_ns``: wall time (ns) of the optimiser step that
        produced the version; the end-to-end lag runs from it (default: the start of the sync).

        Across processes: the trainer side runs its boundaries with ``end_to_end=False`` and sends
        ``session.handoff()`` with the weights; the generator side opens ``sync(handoff=...)``, which
        takes the version, step time, expected names and dump fingerprints from it (so ``load`` compares
        against the trainer's dump), continues the trainer's trace, and emits the end-to-end lag."""
        rec = recorder_or_global(self._recorder)
        parent = None
        if handoff is not None:
            version = int(handoff["version"]) if version is None else version
            optimizer_step_ns = optimizer_step_ns or handoff.get("optimizer_step_ns")
            expected = expected if expected is not None else handoff.get("expected")
            parent = handoff.get("traceparent")
        if version is None:
            raise ValueError("sync() needs a version (or a handoff carrying one)")
        s = SyncSession(self, version, optimizer_step_ns, expected, self.required)
        if handoff is not None and handoff.get("fingerprints"):
            s.dump_fingerprints = dict(handoff["fingerprints"])
        failed: BaseException | None = None
        with rec.span("weight_sync", parent=parent, version=int(version)) as sp:
            s.traceparent = sp.traceparent if sp.trace_id else None
            try:
                yield s
            except BaseException as exc:
                failed = exc
                raise
            finally:
                for name in self.required:
                    if name not in s.results:
                        f = {"boundary": name, "start_ns": time.time_ns(), "duration_s": 0.0, "outcome": "skipped"}
                        if name == "cache_reset":
                            f.update(reset_requested=False, reset_confirmed=False)
                        s.results[name] = f
                        rec.emit("weight_sync", version=s.version, **f)
                end = s.serving_ns or time.time_ns()
                origin = s.optimizer_step_ns if s.optimizer_step_ns is not None else s.start_ns
                outcomes = [r["outcome"] for r in s.results.values()]
                worst = next((o for o in ("error", "torn", "mismatch", "skipped") if o in outcomes), "ok")
                if failed is not None:
                    worst = "error"
                sp.set("outcome", worst)
                sp.set("outcomes", json.dumps({k: v["outcome"] for k, v in s.results.items()}))
                if end_to_end:
                    paths = {r.get("path") for r in s.results.values()} - {None}
                    rec.emit("weight_sync", version=s.version, boundary="end_to_end", start_ns=origin,
                             duration_s=(end - origin) / 1e9, outcome=worst,
                             bytes=s.results.get("transfer", {}).get("bytes"),
                             **({"path": paths.pop()} if len(paths) == 1 else {}))
                self.last = s
