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
from trainer_ref.task import get_task

EVAL_SEED_OFFSET = 777_777
MAX_GRADE_ATTEMPTS = 5  # gradings of one batch lost to grader deaths before its groups are dropped
# every drop reason trainer_ref records; checked against the ledger schema and goodput at start-up
DROP_REASONS = ("stale", "ttl", "grader_error")


def check_drop_reasons(reasons: tuple[str, ...] = DROP_REASONS) -> None:
    """Fail at start-up (not in the dispatcher, mid-run) if a reason this trainer records is not in the
    schema (``probes.ledger.DROP_REASONS``) or has no goodput category."""
    from probes.goodput import REASON_TO_CATEGORY
    from probes.ledger import DROP_REASONS as SCHEMA

    bad = [r for r in reasons if r not in SCHEMA or r not in REASON_TO_CATEGORY]
    if bad:
        raise ValueError(f"trainer_ref drop reasons {bad} not in the ledger schema {SCHEMA} / goodput categories")


def actor_errors() -> tuple[type[BaseException], ...]:
    """What a call to a dead or restarting Ray actor raises (ActorDiedError and ActorUnavailableError
    are RayActorErrors; listed for the reader)."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    return (RayActorError, ActorDiedError, ActorUnavailableError)


class Orchestrator:
    def __init__(self, cfg: Config, model_dir: str, hashes: dict[str, str], actors: dict[str, Any]) -> None:
        check_drop_reasons()
        self.cfg, self.model_dir, self.hashes = cfg, model_dir, hashes
        self.fault = faults.from_config(cfg)
        self.gen, self.trainer, self.graders = actors["generator"], actors["trainer"], actors["graders"]
        self.trainers = list(actors.get("trainers") or [self.trainer])  # data-parallel ranks, rank 0 first
        self.step, self.version, self.cursor = 0, 0, 0
        self.ledger = Ledger()
        self.admission = self._admission()
        self.buffer: deque[dict[str, Any]] = deque()  # graded groups not yet consumed (checkpointed)
        self.history: list[dict[str, Any]] = []
        self.evals: list[dict[str, Any]] = []
        self.consumed_groups: list[str] = []
        self.dropped: dict[str, int] = {}
        self.syncs: list[dict[str, Any]] = []
        self._pending_sync: Any = None
        self._gi = 0
        self.on_step: Callable[[dict[str, Any]], None] | None = None
        # actor recovery (separate_async): the generator / grader instances we synced and pointed at
        # this run, one RLock serialising every weight push, and what each restart cost
        self._sync_lock = threading.RLock()
        self._gen_inc: str | None = None
        self._grader_inc: dict[int, str] = {}
        self.restarts: list[dict[str, Any]] = []
        self.recovery = {"resubmitted_groups": 0, "regraded_groups": 0, "grader_lost_samples": 0}

    # ----- data ------------------------------------------------------------------------------
    def next_groups(self, k: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(k):
            p = get_task(self.cfg.task).problem(self.cfg.seed, self.cursor, self.cfg.chain_prob)
            out.append({"group_id": f"p{p.index}", "prompt_idx": p.index, "prompt": p.prompt, "answer": p.answer,
                        "n": self.cfg.group_size, "seed": self.cfg.seed * 1_000_003 + p.index, "kind": p.kind})
            self.cursor += 1
        return out

    # ----- grading ---------------------------------------------------------------------------
    def grade_async(self, groups: list[dict[str, Any]]) -> Any:
        """Submit a list of groups to a grader (round robin); returns an ObjectRef of results."""
        self._mark_generated(groups)
        return self._grade_on(groups, self._next_grader())

    def _mark_generated(self, groups: list[dict[str, Any]]) -> None:
        for g in groups:
            for s in g["samples"]:
                self.ledger.mark(s["sample_id"], g["group_id"], "generated", tokens=len(s["completion_ids"]))

    def _next_grader(self) -> int:
        i = self._gi % len(self.graders)
        self._gi += 1
        return i

    def _grade_on(self, groups: list[dict[str, Any]], i: int) -> Any:
        """Grade on worker ``i`` (no ledger transition: a re-grade after a grader death uses it too)."""
        return self.graders[i].grade.remote([s for g in groups for s in g["samples"]], time.time())

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

    def _drop_group(self, g: dict[str, Any], reason: str) -> None:
        now = time.time()
        for s in g["samples"]:
            self.ledger.mark(s["sample_id"], g["group_id"], "dropped", reason=reason, tokens=len(s["completion_ids"]),
                             age_s=now - s["t_done"])
        self.dropped[reason] = self.dropped.get(reason, 0) + len(g["samples"])
        telemetry.probe().goodput.add_drop(reason, sum(len(s["completion_ids"]) for s in g["samples"]), len(g["samples"]))

    # ----- actor recovery (separate_async) ---------------------------------------------------
    # Generator and graders are Ray actors with ``max_restarts``: a killed one comes back with its
    # constructor's state (a fresh vLLM engine with the initial model, nothing in flight, its recorder
    # on the run it was created for). The dispatcher notices (an actor error from a call, or a new
    # ``incarnation``), waits for it, points it at this run, re-pushes the trainer's weights to a
    # generator (else its version tag would not describe the weights it samples with), resubmits the
    # groups that were in flight on it and re-grades the groups whose grading was lost.
    def _wait_ready(self, actor: Any) -> str:
        """Block until ``actor`` answers (while Ray restarts it, calls fail); its incarnation."""
        import ray
        from ray.exceptions import GetTimeoutError

        deadline = time.time() + self.cfg.restart_timeout_s
        while True:
            try:
                return ray.get(actor.incarnation.remote(), timeout=max(1.0, min(30.0, deadline - time.time())))
            except (*actor_errors(), GetTimeoutError) as e:
                if time.time() > deadline:
                    raise RuntimeError(f"actor not back after {self.cfg.restart_timeout_s:.0f} s "
                                       f"(max_restarts={self.cfg.max_restarts}): {type(e).__name__}") from e
                time.sleep(0.2)

    def _baseline_incarnations(self) -> None:
        """The instances this run synced and pointed at its record (taken when the dispatcher starts)."""
        import ray

        if self._gen_inc is None:
            self._gen_inc = ray.get(self.gen.incarnation.remote())
        for i, w in enumerate(self.graders):
            if w is not self.gen and i not in self._grader_inc:
                self._grader_inc[i] = ray.get(w.incarnation.remote())

    def _note_restart(self, component: str, rank: int, old: str | None, new: str, cause: str, wait_s: float,
                      **extra: Any) -> None:
        """The restart in the record: an ``incident`` (fault ``actor_restart:<component>``) and a heartbeat."""
        r = {"component": component, "rank": rank, "step": self.step, "old": old, "new": new, "cause": cause,
             "wait_s": round(wait_s, 3), **extra}
        self.restarts.append(r)
        telemetry.heartbeat("recover", f"{component} r{rank} restarted ({cause}); back after {wait_s:.1f}s")
        telemetry.SWITCH.emit("incident", fault=f"actor_restart:{component}", onset_step=int(self.step),
                              magnitude=float(wait_s), detail=telemetry.to_json(r))

    def _ensure_generator(self, cause: str) -> bool:
        """If the generator is not the instance this run synced: wait for it, point it at this run and
        push the trainer's current weights (interrupt ``abort``). True when this call recovered it."""
        import ray

        with self._sync_lock:
            t0 = time.time()
            inc = self._wait_ready(self.gen)
            if inc == self._gen_inc:
                return False
            ray.get([self.gen.set_run.remote(self.cfg.run_dir, self.cfg.to_dict(), self.hashes),
                     self.gen.set_telemetry.remote(telemetry.enabled())])
            self._pending_sync = None  # an update sent to the dead instance died with it
            for attempt in range(3):
                try:
                    rep = self.sync_weights(interrupt="abort")
                    break
                except actor_errors():  # died again while loading: wait for the next instance
                    self._pending_sync = None
                    inc = self._wait_ready(self.gen)
                    ray.get([self.gen.set_run.remote(self.cfg.run_dir, self.cfg.to_dict(), self.hashes),
                             self.gen.set_telemetry.remote(telemetry.enabled())])
            else:
                raise RuntimeError("generator died during every re-sync after its restart")
            old, self._gen_inc = self._gen_inc, inc
            self._note_restart("generator", 0, old, inc, cause, time.time() - t0,
                               resynced_version=(rep or {}).get("version"))
            return True

    def _ensure_grader(self, i: int, cause: str) -> bool:
        """Wait for grader ``i`` and point a restarted one at this run. True when it had restarted."""
        import ray

        w = self.graders[i]
        if w is self.gen:  # colocated graders live in the generator
            return self._ensure_generator(cause)
        t0 = time.time()
        inc = self._wait_ready(w)
        if inc == self._grader_inc.get(i):
            return False
        ray.get([w.set_run.remote(self.cfg.run_dir, self.cfg.to_dict(), self.hashes),
                 w.set_telemetry.remote(telemetry.enabled())])
        old, self._grader_inc[i] = self._grader_inc.get(i), inc
        self._note_restart("grader", i, old, inc, cause, time.time() - t0)
        return True

    def _resilient_sync(self, call: Callable[[], Any]) -> Any:
        """The trainer loop's weight push / collect, tolerating a generator death: the recovery re-pushes
        the trainer's current weights, then the call is repeated (at worst the same version twice)."""
        for _ in range(3):
            try:
                with self._sync_lock:
                    return call()
            except actor_errors() as e:
                with self._sync_lock:
                    self._pending_sync = None
                self._ensure_generator(f"weight sync: {type(e).__name__}")
        raise RuntimeError("weight sync failed across three generator restarts")

    # ----- consumption, training, sync -------------------------------------------------------
    def _admission(self) -> Any:
        """The driver's StalenessProbe: staleness and TTL bounds at consumption; its drops go to the ledger."""
        from probes import StalenessProbe

        return StalenessProbe(telemetry.SWITCH, max_staleness=self.cfg.max_staleness, ttl_s=self.cfg.rollout_ttl_s,
                              is_cap=self.cfg.tis_cap or 2.0, ledger=self.ledger)

    def admit(self, g: dict[str, Any]) -> bool:
        """Apply the staleness / TTL bounds to a graded group as a whole (GRPO needs its group): every
        sample is judged on the group's dispatch tag (oldest version and time), so all share the verdict;
        a dropped group's samples are dropped in the ledger with the reason, its tokens in goodput."""
        tags = [telemetry.dispatch_tag(s) for s in g["samples"]]
        tag = {"dispatch_version": min(t["dispatch_version"] for t in tags), "dispatch_ns": min(t["dispatch_ns"] for t in tags)}
        self.admission.max_staleness = faults.max_staleness(self.fault, self.step, self.cfg.max_staleness)
        why = None
        for s in g["samples"]:
            why = self.admission.admit(s["sample_id"], tag, self.version, tokens=len(s["completion_ids"]))
        if why:
            self.dropped[why] = self.dropped.get(why, 0) + len(g["samples"])
            telemetry.probe().goodput.add_drop(why, sum(len(s["completion_ids"]) for s in g["samples"]), len(g["samples"]))
        return why is None

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
            wait = P.grader.take_wait()
            n = len(self.trainers)  # data parallel: whole groups per rank, every rank steps at once
            outs = ray.get([t.train_step.remote(groups[r::n], self.step, data_wait_s, reward_wait_s=wait)
                            for r, t in enumerate(self.trainers)])
            out = outs[0]  # rank 0 reports the whole step (statistics reduced over the ranks)
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
        telemetry.heartbeat("sync", f"v{self.version}")
        with telemetry.probe().throughput.sync_bubble():
            meta = ray.get(self.trainer.sync_out.remote())
        ref = self.gen.update_weights.remote(meta["ref"], meta["version"], meta["fingerprints"], meta["shapes"],
                                             interrupt, handoff=meta["handoff"])
        self._pending_sync = (ref, meta, t0)
        return self.finish_sync() if wait else None

    def finish_sync(self) -> dict[str, Any] | None:
        import ray

        pending = getattr(self, "_pending_sync", None)
        if pending is None:
            return None
        self._pending_sync = None
        ref, meta, t0 = pending
        with telemetry.probe().throughput.sync_bubble():
            rep = ray.get(ref)
        tr_s = meta["put_s"] + rep["transfer_recv_s"]
        v = meta["version"]
        e2e = time.perf_counter() - t0
        telemetry.on_phase("sync", e2e)  # the boundaries' events come from the WeightSyncProbe on both sides
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
            p = get_task(self.cfg.task).problem(self.cfg.seed + EVAL_SEED_OFFSET, i, self.cfg.chain_prob)
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
        ray.get([t.load.remote(str(d), st["version"]) for t in self.trainers])
        self.step, self.version, self.cursor = st["step"], st["version"], st["cursor"]
        self.buffer = deque(st["buffer"])
        self.ledger = Ledger(st["ledger"])
        self.admission = self._admission()
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
            if self.admit(g):
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
            sent: dict[str, dict[str, Any]] = {}  # group id -> group on the generator, not yet polled back
            grading: list[tuple[Any, list[dict[str, Any]], int, int]] = []  # (ref, groups, grader, attempt)
            seen = {"gen": self._gen_inc, "check": 0.0}

            def resubmit_lost(force: bool = False) -> None:
                """After a generator restart (or any failed call: a lost poll reply took its groups with
                it): submit again the groups the generator does not hold."""
                if seen["gen"] == self._gen_inc and not force:
                    return
                known = set(ray.get(self.gen.known_groups.remote()))
                lost = [g for gid, g in sent.items() if gid not in known]
                if lost:
                    ray.get(self.gen.submit.remote(lost))
                self.recovery["resubmitted_groups"] += len(lost)
                if self.restarts:
                    self.restarts[-1]["resubmitted_groups"] = self.restarts[-1].get("resubmitted_groups", 0) + len(lost)
                seen["gen"] = self._gen_inc

            def gen_call(fn: Callable[[], Any]) -> Any:
                """fn() against the generator; on a failure: recover it (a restarted one is re-synced),
                resubmit what it lost, and return None (the call itself is not repeated)."""
                for attempt in range(4):
                    try:
                        resubmit_lost(force=attempt > 0)
                        return fn() if attempt == 0 else None
                    except actor_errors() as e:
                        self._ensure_generator(type(e).__name__)
                raise RuntimeError("the generator kept failing during its recovery")

            probes_out: dict[int, Any] = {}  # actor index (-1: generator) -> pending incarnation() call

            def check_incarnations() -> None:
                """A death between two calls is seen only here: a new incarnation answers (or the call
                fails). Non-blocking: a busy grader answers on a later round."""
                actors = [(-1, self.gen)] + [(i, w) for i, w in enumerate(self.graders) if w is not self.gen]
                if probes_out:
                    ready, _ = ray.wait(list(probes_out.values()), num_returns=len(probes_out), timeout=0)
                    for k, ref in [(k, r) for k, r in probes_out.items() if r in set(ready)]:
                        del probes_out[k]
                        try:
                            inc = ray.get(ref)
                        except actor_errors() as e:
                            inc = type(e).__name__
                        if k < 0 and inc != self._gen_inc:
                            self._ensure_generator("new incarnation" if ":" in inc else inc)
                            resubmit_lost()
                        elif k >= 0 and inc != self._grader_inc.get(k):
                            self._ensure_grader(k, "new incarnation" if ":" in inc else inc)
                if time.time() - seen["check"] >= 0.5:
                    seen["check"] = time.time()
                    for k, a in actors:
                        if k not in probes_out:
                            probes_out[k] = a.incarnation.remote()

            def received(done: list[dict[str, Any]] | None) -> None:
                done = [g for g in done or [] if sent.pop(g["group_id"], None) is not None]
                if done:
                    self._mark_generated(done)
                    i = self._next_grader()
                    grading.append((self._grade_on(done, i), done, i, 0))

            def collect(timeout: float, into_buffer: bool) -> None:
                if not grading:
                    return
                ready, _ = ray.wait([x[0] for x in grading], num_returns=len(grading), timeout=timeout)
                ready_set = set(ready)
                for entry in [x for x in grading if x[0] in ready_set]:
                    grading.remove(entry)
                    ref, groups, i, attempt = entry
                    try:
                        res = ray.get(ref)
                    except actor_errors() as e:  # the grader died: its results are gone, grade again
                        self._ensure_grader(i, type(e).__name__)
                        if attempt + 1 < MAX_GRADE_ATTEMPTS:
                            self.recovery["regraded_groups"] += len(groups)
                            j = self._next_grader()
                            grading.append((self._grade_on(groups, j), groups, j, attempt + 1))
                            continue
                        for g in groups:  # every grader died under it: dropped with a reason, not lost
                            self.recovery["grader_lost_samples"] += len(g["samples"])
                            self._drop_group(g, "grader_error")
                        res = None
                    for g in self.attach_rewards(groups, res) if res is not None else []:
                        placed = False
                        while not into_buffer and not stop.is_set():
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

            try:
                self._baseline_incarnations()
                seen["gen"] = self._gen_inc
                while not stop.is_set():
                    check_incarnations()
                    with lock:
                        room = min(faults.max_outstanding(self.fault, self.step, max_outstanding, cap) - state["in_flight"] - graded.qsize(), B)
                    if room > 0:
                        groups = self.next_groups(room)
                        with lock:
                            state["in_flight"] += len(groups)
                        sent.update((g["group_id"], g) for g in groups)
                        gen_call(lambda: ray.get(self.gen.submit.remote(groups)))  # lost ones: resubmitted
                    received(gen_call(lambda: ray.get(self.gen.poll.remote(0, 0.05))))
                    collect(0, into_buffer=False)
                    telemetry.on_queue("generator_inflight", state["in_flight"], max_outstanding)
                # drain: everything dispatched ends up graded in the buffer (checkpointable)
                while state["in_flight"] > 0:
                    check_incarnations()
                    received(gen_call(lambda: ray.get(self.gen.poll.remote(0, 0.2 if sent else 0))))
                    collect(0.2, into_buffer=True)
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
                    if self.admit(g):
                        batch.append(g)
                telemetry.on_queue("graded", graded.qsize(), cap)
                out = self.train_on(batch, time.perf_counter() - t0)
                # engine-side stages overlap the next step; the previous sync is collected first
                self._resilient_sync(lambda: self.sync_weights(wait=False))
                self.finish_step(out)
            self._resilient_sync(self.finish_sync)
        finally:
            stop.set()
            th.join(timeout=600)
            earlier = []
            while not graded.empty():
                earlier.append(graded.get())
            self.buffer = deque(earlier + list(self.buffer))
