"""The driver: starts the Ray actors and runs one of the three modes.

* ``sync``: dispatch a batch, wait for every completion, grade, train, sync weights, repeat.
* ``colocate_async``: the batch for step k+1 is generated (with weights v_k) while the trainer
  trains step k; weights are synced once both are done (one-step off-policy, staleness 1).
* ``separate_async``: a dispatcher thread keeps the generator fed and moves finished groups
  through the graders into a bounded queue; the trainer loop consumes from it, drops groups that
  are too stale (trainer version - dispatch version > ``max_staleness``) or too old (``rollout_ttl_s``),
  and syncs weights after every step while generation goes on (interrupting in-flight requests
  per ``interrupt``). Admission control keeps dispatched-but-unconsumed groups under
  ``(max_staleness + 1) * groups_per_step`` and the queue under ``queue_capacity``.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections import deque
from typing import Any, Callable

from trainer_ref import checkpoint, faults, telemetry
from trainer_ref.config import Config
from trainer_ref.ledger import Ledger
from trainer_ref.task import make_problem

EVAL_SEED_OFFSET = 777_777


class Orchestrator:
    def __init__(self, cfg: Config, model_dir: str, hashes: dict[str, str], actors: dict[str, Any]) -> None:
        self.cfg, self.model_dir, self.hashes = cfg, model_dir, hashes
        self.fault = faults.from_config(cfg)
        self.gen, self.trainer, self.graders = actors["generator"], actors["trainer"], actors["graders"]
        self.step, self.version, self.cursor = 0, 0, 0
        self.ledger = Ledger()
        self.buffer: deque[dict[str, Any]] = deque()  # graded groups not yet consumed (checkpointed)
        self.history: list[dict[str, Any]] = []
        self.evals: list[dict[str, Any]] = []
        self.consumed_groups: list[str] = []
        self.dropped: dict[str, int] = {}
        self.syncs: list[dict[str, Any]] = []
        self._pending_sync: Any = None
        self._gi = 0
        self.on_step: Callable[[dict[str, Any]], None] | None = None

    # ----- data ------------------------------------------------------------------------------
    def next_groups(self, k: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(k):
            p = make_problem(self.cfg.seed, self.cursor, chain_prob=self.cfg.chain_prob)
            out.append({"group_id": f"p{p.index}", "prompt_idx": p.index, "prompt": p.prompt, "answer": p.answer,
                        "n": self.cfg.group_size, "seed": self.cfg.seed * 1_000_003 + p.index, "kind": p.kind})
            self.cursor += 1
        return out

    # ----- grading ---------------------------------------------------------------------------
    def grade_async(self, groups: list[dict[str, Any]]) -> Any:
        """Submit a list of groups to a grader (round robin); returns an ObjectRef of results."""
        samples = [s for g in groups for s in g["samples"]]
        for g in groups:
            for s in g["samples"]:
                self.ledger.mark(s["sample_id"], g["group_id"], "generated", tokens=len(s["completion_ids"]))
        w = self.graders[self._gi % len(self.graders)]
        self._gi += 1
        return w.grade.remote(samples, time.time())

    def rewards_for(self, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Grade and wait for the rewards (the wait is the trainer's reward-wait time)."""
        import ray

        ref = self.grade_async(groups)
        with telemetry.probe().grader.waiting():
            return ray.get(ref)

    def attach_rewards(self, groups: list[dict[str, Any]], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        by_id = {r["sample_id"]: r for r in results}
        n_gen = sum(len(g["samples"]) for g in groups)
        self._tp_gen = getattr(self, "_tp_gen", 0) + n_gen
        telemetry.probe().throughput.produced(n_gen, sum(len(s["completion_ids"]) for g in groups for s in g["samples"]))
        kept = []
        for g in groups:
            ok = []
            for s in g["samples"]:
                r = by_id[s["sample_id"]]
                if r["outcome"] == "ok":
                    s["reward"] = r["reward"]
                    self.ledger.mark(s["sample_id"], g["group_id"], "graded")
                    ok.append(s)
                else:
                    self.ledger.mark(s["sample_id"], g["group_id"], "dropped", reason="grader_error",
                                     tokens=len(s["completion_ids"]))
                    self.dropped["grader_error"] = self.dropped.get("grader_error", 0) + 1
            if len(ok) >= 2:
                kept.append({**g, "samples": ok})
            else:
                self._drop_group({**g, "samples": ok}, "grader_error")
        return kept

    def _drop_group(self, g: dict[str, Any], reason: str, staleness: int | None = None) -> None:
        now = time.time()
        for s in g["samples"]:
            self.ledger.mark(s["sample_id"], g["group_id"], "dropped", reason=reason, tokens=len(s["completion_ids"]),
                             staleness=staleness, age_s=now - s["t_done"])
        self.dropped[reason] = self.dropped.get(reason, 0) + len(g["samples"])
        telemetry.probe().goodput.add_drop(reason, sum(len(s["completion_ids"]) for s in g["samples"]), len(g["samples"]))

    # ----- consumption, training, sync -------------------------------------------------------
    def admissible(self, g: dict[str, Any]) -> str | None:
        """Why a graded group may not be consumed now (None: it may)."""
        stal = self.version - min(s["dispatch_version"] for s in g["samples"])
        if stal > faults.max_staleness(self.fault, self.step, self.cfg.max_staleness):
            return "stale"
        if time.time() - min(s["t_done"] for s in g["samples"]) > self.cfg.rollout_ttl_s:
            return "ttl"
        return None

    def train_on(self, groups: list[dict[str, Any]], data_wait_s: float) -> dict[str, Any]:
        import ray

        now = time.time()
        telemetry.set_context(step=self.step, version=self.version)  # consumed transitions carry this step
        stal_hist: dict[int, int] = {}
        ages = []
        for g in groups:
            for s in g["samples"]:
                st = self.version - s["dispatch_version"]
                assert 0 <= st <= faults.max_staleness(self.fault, self.step, self.cfg.max_staleness), f"staleness {st} beyond bound"
                stal_hist[st] = stal_hist.get(st, 0) + 1
                ages.append(now - s["t_done"])
                self.ledger.mark(s["sample_id"], g["group_id"], "consumed", tokens=len(s["completion_ids"]),
                                 staleness=st, age_s=now - s["t_done"])
            self.consumed_groups.append(g["group_id"])
        telemetry.set_context(step=self.step, version=self.version)
        P = telemetry.probe()
        with telemetry.span("train_step", step=self.step, version=self.version):
            out = ray.get(self.trainer.train_step.remote(groups, self.step, data_wait_s,
                                                         reward_wait_s=P.grader.take_wait()))
        # the staleness event (histogram, ages, importance stats) comes from the trainer's StalenessProbe
        flat = [(len(set(s["reward"] for s in g["samples"])) == 1, s) for g in groups for s in g["samples"]]
        gp = telemetry.probe().goodput
        gp.add_batch([len(s["completion_ids"]) for _, s in flat], zero_advantage=[z for z, _ in flat])
        aborted = sum(s.get("aborted_tokens", 0) for _, s in flat)
        if aborted:
            gp.add("aborted", aborted, 0)
        if telemetry.enabled():
            gp.emit_step(self.step)
            self._tick_throughput(flat, out)
        self.version = out["version"]
        out.update(staleness_hist=stal_hist, data_wait_s=data_wait_s, wall=time.time())
        self.history.append(out)
        return out

    def _tick_throughput(self, flat: list[tuple[bool, dict[str, Any]]], out: dict[str, Any]) -> None:
        """Generator-side window seen from the driver: produced vs consumed (effective) samples, sync
        bubbles, and the staleness the generator and trainer rates predict."""
        from probes import predict_staleness

        tp = telemetry.probe().throughput
        tp.effective(len(flat))
        now = time.perf_counter()
        window = now - getattr(self, "_tp_t", now - max(out["step_seconds"], 1e-9))
        self._tp_t = now
        gen_sps = getattr(self, "_tp_gen", 0) / window if window > 0 else 0.0
        lat = sum(s["gen_seconds"] for _, s in flat) / max(len(flat), 1)
        pred = predict_staleness(gen_sps, len(flat) / max(out["step_seconds"], 1e-9), len(flat),
                                 generation_latency_s=lat, queue_capacity=self.cfg.queue_capacity * self.cfg.group_size,
                                 max_staleness=self.cfg.max_staleness)
        tp.tick(predicted_staleness=pred if math.isfinite(pred) else None, force=True)
        self._tp_gen = 0

    def sync_weights(self, interrupt: str | None = None, wait: bool = True) -> dict[str, Any] | None:
        """Push the trainer's weights to the generator (stages 1-5). With ``wait=False`` the
        engine-side stages run while the trainer goes on (at most one sync in flight); the report
        lands in ``self.syncs`` when ``finish_sync`` collects it."""
        import ray

        self.finish_sync()
        t0 = time.perf_counter()
        start_ns = time.time_ns()
        telemetry.heartbeat("sync", f"v{self.version}")
        with telemetry.probe().throughput.sync_bubble():
            meta = ray.get(self.trainer.sync_out.remote())
        ref = self.gen.update_weights.remote(meta["ref"], meta["version"], meta["fingerprints"], meta["shapes"],
                                             interrupt)
        self._pending_sync = (ref, meta, t0, start_ns)
        return self.finish_sync() if wait else None

    def finish_sync(self) -> dict[str, Any] | None:
        import ray

        pending = getattr(self, "_pending_sync", None)
        if pending is None:
            return None
        self._pending_sync = None
        ref, meta, t0, start_ns = pending
        with telemetry.probe().throughput.sync_bubble():
            rep = ray.get(ref)
        tr_s = meta["put_s"] + rep["transfer_recv_s"]
        v = meta["version"]
        telemetry.on_sync_boundary(v, "transfer", duration_s=tr_s, bytes=meta["bytes"], outcome="ok",
                                   bandwidth_bps=meta["bytes"] / tr_s if tr_s > 0 else None, retries=0)
        e2e = time.perf_counter() - t0
        telemetry.on_phase("sync", e2e)
        ok = not rep["mismatched"] and rep["reset_confirmed"]
        telemetry.on_sync_boundary(v, "end_to_end", start_ns=start_ns, duration_s=e2e, bytes=meta["bytes"],
                                   outcome="ok" if ok else "mismatch", fingerprint=meta["digest"],
                                   fingerprint_match=not rep["mismatched"])
        telemetry.on_span("weight_sync", start_ns, time.time_ns(), "ok" if ok else "error", version=v)
        if rep["mismatched"] and not faults.tolerate_mismatch(self.fault):
            raise RuntimeError(f"weight sync v{v}: engine fingerprints differ for {rep['mismatched'][:5]}")
        out = {**rep, "dump_s": meta["dump_s"], "staging_s": meta["staging_s"], "put_s": meta["put_s"],
               "transfer_s": tr_s, "end_to_end_s": e2e, "bytes": meta["bytes"]}
        self.syncs.append(out)
        return out

    def finish_step(self, out: dict[str, Any]) -> None:
        self.step += 1
        if self.cfg.eval_every and self.step % self.cfg.eval_every == 0 and self.step < self.cfg.steps:
            out["eval"] = self.evaluate()
        telemetry.on_queue("graded", len(self.buffer), self.cfg.queue_capacity)
        if self.on_step:
            self.on_step(out)

    # ----- evaluation ------------------------------------------------------------------------
    def evaluate(self, n_prompts: int | None = None) -> float:
        import ray

        from trainer_ref.graders import grade_exact

        n = n_prompts or self.cfg.eval_prompts
        groups = []
        for i in range(n):
            p = make_problem(self.cfg.seed + EVAL_SEED_OFFSET, i, chain_prob=self.cfg.chain_prob)
            groups.append({"group_id": f"eval{self.step}-{i}", "prompt_idx": -1 - i, "prompt": p.prompt,
                           "answer": p.answer, "n": 4, "seed": 99_991 * (i + 1)})
        done = ray.get(self.gen.generate.remote(groups))
        rewards = [grade_exact(s) for g in done for s in g["samples"]]
        mean = sum(rewards) / max(1, len(rewards))
        telemetry.on_scalar("eval_reward_mean", mean, step=self.step)
        self.evals.append({"step": self.step, "reward_mean": mean, "samples": len(rewards)})
        return mean

    # ----- checkpoint ------------------------------------------------------------------------
    def save_checkpoint(self) -> None:
        import ray

        d = checkpoint.step_dir(self.cfg.run_dir, self.step)
        ray.get(self.trainer.save.remote(str(d)))
        checkpoint.write_state(self.cfg.run_dir, self.step, {
            "step": self.step, "version": self.version, "cursor": self.cursor, "buffer": list(self.buffer),
            "ledger": self.ledger.to_json(), "consumed_groups": self.consumed_groups, "dropped": self.dropped,
            "evals": self.evals, "config": self.cfg.to_dict()})

    def restore(self) -> bool:
        import ray

        d = checkpoint.latest(self.cfg.run_dir)
        if d is None:
            return False
        st = faults.resume_state(self.fault, checkpoint.read_state(d), self.cfg.groups_per_step)
        ray.get(self.trainer.load.remote(str(d), st["version"]))
        self.step, self.version, self.cursor = st["step"], st["version"], st["cursor"]
        self.buffer = deque(st["buffer"])
        self.ledger = Ledger(st["ledger"])
        self.consumed_groups = list(st["consumed_groups"])
        self.dropped = dict(st["dropped"])
        self.evals = list(st["evals"])
        if faults.push_weights_on_resume(self.fault):
            self.sync_weights(interrupt="abort")  # the engine serves the restored policy
        return True

    # ----- modes -----------------------------------------------------------------------------
    def run(self, steps: int, stop_after: int = 0) -> None:
        """Train up to ``steps`` (or ``stop_after`` more). Every ``checkpoint_every`` steps the
        pipeline is drained (in-flight groups finish and are graded into the buffer) and saved."""
        end = steps if not stop_after else min(steps, self.step + stop_after)
        every = self.cfg.checkpoint_every
        while self.step < end:
            chunk_end = min(end, (self.step // every + 1) * every) if every else end
            getattr(self, "_run_" + self.cfg.mode)(chunk_end)
            if every and self.step % every == 0 and self.step < end:
                self.save_checkpoint()

    def _take_from_buffer(self, k: int) -> list[dict[str, Any]]:
        batch = []
        while self.buffer and len(batch) < k:
            g = self.buffer.popleft()
            why = self.admissible(g)
            if why:
                self._drop_group(g, why, self.version - min(s["dispatch_version"] for s in g["samples"]))
            else:
                batch.append(g)
        return batch

    def _run_sync(self, end: int) -> None:
        import ray

        B = self.cfg.groups_per_step
        while self.step < end:
            t0 = time.perf_counter()
            batch = self._take_from_buffer(B)
            while len(batch) < B:
                with telemetry.span("generate", step=self.step):
                    done = ray.get(self.gen.generate.remote(self.next_groups(B - len(batch))))
                res = self.rewards_for(done)
                batch += self.attach_rewards(done, res)
            out = self.train_on(batch, time.perf_counter() - t0)
            self.sync_weights()
            self.finish_step(out)

    def _run_colocate_async(self, end: int) -> None:
        import ray

        B = self.cfg.groups_per_step
        pending = self.gen.generate.remote(self.next_groups(B)) if not self.buffer else None
        while self.step < end:
            t0 = time.perf_counter()
            batch = self._take_from_buffer(B)
            if len(batch) < B:
                done = ray.get(pending) if pending is not None else ray.get(self.gen.generate.remote(self.next_groups(B)))
                batch += self.attach_rewards(done, self.rewards_for(done))
                pending = None
            wait = time.perf_counter() - t0
            if self.step + 1 < end:  # next batch generates with the current weights while we train
                pending = self.gen.generate.remote(self.next_groups(B))
            out = self.train_on(batch[:B], wait)
            self.buffer.extend(batch[B:])
            if pending is not None:
                done = ray.get(pending)  # one-step off-policy: finished under the old weights
                self.buffer.extend(self.attach_rewards(done, self.rewards_for(done)))
                pending = None
            self.sync_weights(interrupt="wait")
            self.finish_step(out)

    def _run_separate_async(self, end: int) -> None:
        import ray

        B, cap = self.cfg.groups_per_step, self.cfg.queue_capacity
        graded: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=cap)
        for g in self.buffer:
            graded.put(g)
        self.buffer.clear()
        stop = threading.Event()
        state = {"in_flight": 0, "error": None}
        lock = threading.Lock()
        max_outstanding = (self.cfg.max_staleness + 1) * B

        def dispatcher() -> None:
            grading: list[tuple[Any, list[dict[str, Any]]]] = []
            try:
                while not stop.is_set():
                    with lock:
                        room = min(faults.max_outstanding(self.fault, self.step, max_outstanding, cap) - state["in_flight"] - graded.qsize(), B)
                    if room > 0:
                        groups = self.next_groups(room)
                        with lock:
                            state["in_flight"] += len(groups)
                        self.gen.submit.remote(groups)
                    done = ray.get(self.gen.poll.remote(0, 0.05))
                    if done:
                        grading.append((self.grade_async(done), done))
                    ready = [x for x in grading if ray.wait([x[0]], timeout=0)[0]]
                    for ref, groups in ready:
                        grading.remove((ref, groups))
                        for g in self.attach_rewards(groups, ray.get(ref)):
                            placed = False
                            while not stop.is_set():
                                try:
                                    graded.put(g, timeout=0.1)
                                    placed = True
                                    break
                                except queue.Full:
                                    continue
                            if not placed:  # stopping: keep it for the checkpoint instead of losing it
                                self.buffer.append(g)
                        with lock:
                            state["in_flight"] -= len(groups)
                    telemetry.on_queue("generator_inflight", state["in_flight"], max_outstanding)
                # drain: everything dispatched ends up graded in the buffer (checkpointable)
                while state["in_flight"] > 0:
                    done = ray.get(self.gen.poll.remote(0, 0.2))
                    if done:
                        grading.append((self.grade_async(done), done))
                    for ref, groups in list(grading):
                        res = ray.get(ref)
                        grading.remove((ref, groups))
                        self.buffer.extend(self.attach_rewards(groups, res))
                        with lock:
                            state["in_flight"] -= len(groups)
            except Exception as e:  # surfaced in the trainer loop
                state["error"] = e

        th = threading.Thread(target=dispatcher, daemon=True, name="dispatcher")
        th.start()
        try:
            while self.step < end:
                t0 = time.perf_counter()
                batch: list[dict[str, Any]] = []
                while len(batch) < B:
                    if state["error"]:
                        raise RuntimeError("dispatcher failed") from state["error"]
                    try:
                        g = graded.get(timeout=0.5)
                    except queue.Empty:
                        continue
                    why = self.admissible(g)
                    if why:
                        self._drop_group(g, why, self.version - min(s["dispatch_version"] for s in g["samples"]))
                        continue
                    batch.append(g)
                telemetry.on_queue("graded", graded.qsize(), cap)
                out = self.train_on(batch, time.perf_counter() - t0)
                # engine-side stages overlap the next step; the previous sync is collected first
                self.sync_weights(wait=False)
                self.finish_step(out)
            self.finish_sync()
        finally:
            stop.set()
            th.join(timeout=600)
            earlier = []
            while not graded.empty():
                earlier.append(graded.get())
            self.buffer = deque(earlier + list(self.buffer))
