"""The generator's side of a weight sync, run by its engine thread between two engine steps.

``requeue_inflight`` hands the in-flight requests back to the inbox per the interrupt mode (see
``trainer_ref.generator``), then ``EngineUpdater.apply`` runs stages 3b-5 under the receiving
``WeightSyncProbe`` session: transfer (reach the staged weights: the shared-memory handle, the object
store's bytes landed in this node's staging buffer, or the GPU path's handles), load (every worker
loads from tensors, engine fingerprints compared with the dump's) and the prefix-cache reset, then
the engine serves the new version (the end-to-end lag ends there).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from trainer_ref import faults, telemetry, weight_sync


def requeue_inflight(engine: Any, running: dict[str, dict[str, Any]], inbox: deque[dict[str, Any]],
                     mode: str) -> dict[str, int]:
    """Abort every running request and put it back at the front of ``inbox`` (in order): ``abort``
    throws its tokens away (counted as ``aborted_tokens``), ``resume`` keeps them (re-submitted with
    them appended to the prompt). Returns {aborted, resumed, regenerated}."""
    out = {"aborted": 0, "resumed": 0, "regenerated": 0}
    inflight = list(running.items())
    if inflight:
        engine.abort_request([rid for rid, _ in inflight])
        running.clear()
    for _, req in inflight:
        req["interrupts"] += 1
        if mode == "abort":
            req["aborted_tokens"] += len(req["gen_ids"])
            req.update(gen_ids=[], logprobs=[], min_v=None, max_v=None)
            out["regenerated"] += 1
        else:
            out["resumed"] += 1
    out["aborted"] = len(inflight)
    inbox.extendleft(reversed([req for _, req in inflight]))
    return out


class EngineUpdater:
    """Loads weight updates into one vLLM engine (``llm``) and owns this node's staging buffer for
    weights that crossed nodes (object-store path, made on first use)."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self._staging: weight_sync.StagingBuffer | None = None

    def local_staging(self) -> weight_sync.StagingBuffer:
        if self._staging is None:
            self._staging = weight_sync.StagingBuffer(prefix="rlobs-staging-gen")
        return self._staging

    def close(self) -> None:
        if self._staging is not None:
            self._staging.close()

    def apply(self, upd: dict[str, Any], fault: Any, rep: dict[str, Any], set_version: Callable[[int], None]) -> None:
        """Stages 3b-5 for the update ``upd`` ({ref, version, expected, shapes, handoff}); fills
        ``rep``; ``set_version`` (the generator's version) is called once the cache is reset, before the
        engine counts as serving."""
        v, hand = upd["version"], upd["handoff"]
        with telemetry.probe().wsync_recv.sync(handoff=hand) as sess:
            transport = upd["ref"]
            path = str(transport.get("path") or hand.get("path") or "shm")
            with sess.transfer() as b:  # 3b: reach the staged weights; the sender's half counts in the boundary
                handle, rep["transfer_recv_s"] = weight_sync.receive(transport, self.local_staging())
                nbytes = weight_sync.handle_nbytes(handle)
                rep["bytes"] = b.bytes = nbytes
                rep["path"] = b.path = path
                b.add_seconds(float(hand.get("sender_s") or 0.0))
            t1 = time.perf_counter()
            with sess.load() as b:  # 4: load in every worker from tensors; engine fingerprints vs the dump's
                lr = weight_sync.load_into_engine(self.llm, handle, upd["expected"], upd["shapes"],
                                                  perturb=faults.corruption(fault, v - 1),
                                                  method=weight_sync.LOAD_METHODS[path],
                                                  kind=weight_sync.fingerprint_kind(path))
                b.record_fingerprints(lr.fingerprints, nbytes=nbytes)
                b.mem_hwm_bytes, b.path = lr.mem_hwm_bytes, path
                if path in ("shm", "object_store"):  # the engine's own seqlock read of the staging buffer
                    b.seq_before, b.seq_after, b.torn = lr.seq_before, lr.seq_after, lr.torn
                    if lr.torn:  # it overlapped a write
                        b.outcome = "torn"
            rep.update(load_s=time.perf_counter() - t1, tensors_present=lr.tensors_present,
                       mismatched=lr.mismatched, fingerprint=weight_sync.digest(lr.fingerprints),
                       mem_hwm_bytes=lr.mem_hwm_bytes, engine_reload_s=lr.engine_s, torn=lr.torn,
                       sources={s: sum(1 for x in lr.sources.values() if x == s) for s in set(lr.sources.values())})
            t2 = time.perf_counter()
            with sess.cache_reset() as b:  # 5: requested and confirmed; in-flight requests
                b.path = path
                rep["reset_confirmed"] = faults.reset_cache(fault, v - 1, weight_sync.reset_cache, self.llm)
                if rep["reset_confirmed"] is not None:
                    b.requested()
                    b.confirmed(rep["reset_confirmed"])
                b.inflight(aborted=rep["aborted"], resumed=rep["resumed"])
            rep["reset_s"] = time.perf_counter() - t2
            set_version(v)
            telemetry.set_context(version=v)
            sess.serving()  # the end-to-end lag runs from the optimiser step to here
