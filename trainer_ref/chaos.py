"""Chaos for the reference trainer: kill actors or the driver at random points, then check the run
record like Jepsen checks a history.

* ``kill_actor(actor, how)``: ``ray_kill`` (``ray.kill(actor, no_restart=False)``: Ray restarts it) or
  ``sigkill`` (``os.kill(pid, SIGKILL)`` of the pid in Ray's actor table). Returns the killed pid.
* ``Injector``: an ``on_step`` hook for ``run.train`` that kills the planned actors when the run
  reaches their step (after a random delay inside the step, so the kill lands anywhere in the
  dispatcher's cycle).
* ``check_run(run_dir, ...)``: the checker. It replays the ``ledger`` events of every driver
  invocation (in start order; a resumed one starts from the checkpoint it resumed from), and checks:
  no illegal transition, no sample consumed twice in the committed history (the checkpoint resumed
  from + what came after it), the final checkpoint's ledger equals the replayed one, every sample
  generated reached consumed xor dropped (or sits graded in the checkpointed buffer, ``pending``),
  every completion the generator reported for a dispatched prompt is in the ledger, the record opens
  with page checksums verified, and ``rlobs doctor`` reports every killed process as lost.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from probes.ledger import NEXT, TERMINAL  # the one transition table


# ----- killing ------------------------------------------------------------------------------------
def actor_pid(actor: Any) -> int | None:
    """The pid of ``actor``'s current worker process, from Ray's actor table (GCS)."""
    from ray._private import state

    info = state.actors(actor._actor_id.hex())
    return int(info["Pid"]) if info and info.get("Pid") else None


def kill_actor(actor: Any, how: str) -> int | None:
    """Kill ``actor`` (Ray will restart it if it has restarts left); the pid killed."""
    import ray

    pid = actor_pid(actor)
    if how == "ray_kill":
        ray.kill(actor, no_restart=False)
    elif how == "sigkill":
        if pid:
            os.kill(pid, signal.SIGKILL)
    else:
        raise ValueError(how)
    return pid


class Injector:
    """``plan``: [(step, target, how)] with target ``generator`` or ``grader<i>``; used as ``on_step``."""

    def __init__(self, actors: dict[str, Any], plan: list[tuple[int, str, str]], seed: int = 0,
                 max_delay_s: float = 0.25) -> None:
        self.actors, self.plan = actors, sorted(plan)
        self.rng = random.Random(seed)
        self.max_delay_s = max_delay_s
        self.killed: list[dict[str, Any]] = []
        self.steps = 0
        self._threads: list[threading.Thread] = []

    def _target(self, name: str) -> Any:
        return self.actors["generator"] if name == "generator" else self.actors["graders"][int(name[len("grader"):])]

    def _kill(self, step: int, name: str, how: str, delay: float) -> None:
        time.sleep(delay)
        try:
            pid = kill_actor(self._target(name), how)
            self.killed.append({"step": step, "target": name, "how": how, "pid": pid, "t": time.time()})
        except Exception as e:  # noqa: BLE001 - an actor still restarting has no pid yet: recorded, not fatal
            self.killed.append({"step": step, "target": name, "how": how, "pid": None, "error": repr(e)})

    def __call__(self, out: dict[str, Any]) -> None:
        self.steps += 1
        for step, name, how in [p for p in self.plan if p[0] == self.steps]:
            th = threading.Thread(target=self._kill, args=(step, name, how, self.rng.uniform(0, self.max_delay_s)),
                                  daemon=True)
            th.start()
            self._threads.append(th)

    def join(self) -> None:
        for th in self._threads:
            th.join(timeout=30)


# ----- checking -----------------------------------------------------------------------------------
def _reachable(cur: str | None, target: str) -> bool:
    """``target`` follows ``cur`` through legal transitions."""
    frontier, seen = {cur}, set()
    while frontier:
        nxt = {n for c in frontier for n in NEXT.get(c, set())} - seen
        if target in nxt:
            return True
        seen |= nxt
        frontier = nxt
    return False


def _replay(events: list[tuple[str, str]], start: dict[str, str], res: dict[str, Any]) -> tuple[dict[str, str], dict[str, set[str]], Counter]:
    state = dict(start)
    seen: dict[str, set[str]] = defaultdict(set)
    consumed: Counter = Counter()
    for sid, st in events:
        cur = state.get(sid)
        if st not in NEXT.get(cur, set()):
            res["illegal"] += 1
            if len(res["examples"]) < 5:
                res["examples"].append(f"{sid}: {cur} -> {st}")
        state[sid] = st
        seen[sid].add(st)
        if st == "consumed":
            consumed[sid] += 1
    return state, seen, consumed


def _replay_drivers(rec: Any, resumed_from: list[str | os.PathLike[str] | None] | None,
                    res: dict[str, Any]) -> tuple[dict[str, str], Counter]:
    """Replay every driver invocation's ledger events (in start order; a resumed one from the checkpoint
    it resumed from): the final state and the committed consumptions per sample."""
    from trainer_ref import checkpoint

    drivers = sorted((p for p in rec.processes if p.component == "driver"), key=lambda p: p.started_ns or 0)
    rows = rec.sql("SELECT process, sample_id, state FROM ledger WHERE component = 'driver' "
                   "ORDER BY process, mono_ns, ts_ns").fetchall()
    by_proc: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for proc, sid, st in rows:
        by_proc[proc].append((sid, st))
    resumed_from = list(resumed_from or [])
    state: dict[str, str] = {}
    committed_consumed: Counter = Counter()
    prev_seen: dict[str, set[str]] = {}  # the previous driver invocation's replay (k > 0)
    prev_start: dict[str, str] = {}
    prev_state: dict[str, str] = {}
    for k, d in enumerate(drivers):
        start: dict[str, str] = {}
        if k > 0:
            ck = resumed_from[k - 1] if k - 1 < len(resumed_from) else None
            if ck is not None:
                start = checkpoint.read_state(Path(ck))["ledger"]
                # the checkpoint must be a state the previous invocation passed through; a state ahead
                # of its last recorded one is its unflushed tail (SIGKILL took the recorder's queue)
                ahead, bad_ck = 0, 0
                for s, st in start.items():
                    if st in prev_seen.get(s, set()) or prev_start.get(s) == st:
                        continue
                    if _reachable(prev_state.get(s), st):
                        ahead += 1
                    else:
                        bad_ck += 1
                res["checkpoint_inconsistent"] = bad_ck
                res["unrecorded_before_kill"] = res.get("unrecorded_before_kill", 0) + ahead
                res["illegal"] += bad_ck
            res["rolled_back"] += len({s for s in prev_seen if s not in start})
            committed_consumed = Counter({s: 1 for s, st in start.items() if st == "consumed"})
        state, seen, consumed = _replay(by_proc.get(d.process, []), start, res)
        committed_consumed.update(consumed)
        prev_seen, prev_start, prev_state = seen, start, state
    return state, committed_consumed


def check_run(run_dir: str | os.PathLike[str], killed_pids: list[int] | None = None,
              resumed_from: list[str | os.PathLike[str] | None] | None = None, doctor: bool = True) -> dict[str, Any]:
    """The Jepsen-style check of one run directory (every driver invocation in it).

    ``killed_pids``: processes the schedule killed (the doctor must report each as lost).
    ``resumed_from``: for each driver invocation after the first, in start order, the checkpoint
    directory it resumed from (None: it started fresh)."""
    from rlobs.store import open_run

    from trainer_ref import checkpoint

    run_dir = Path(run_dir)
    res: dict[str, Any] = {"run_dir": str(run_dir), "open_ok": False, "illegal": 0, "examples": [], "lost": 0,
                           "duplicated": 0, "generated": 0, "consumed": 0, "dropped": 0, "pending": 0,
                           "rolled_back": 0, "restarts": 0, "doctor_reported": None, "killed_lost": None}
    try:
        rec = open_run(run_dir, verify=True)
        # a killed writer leaves its segment unsealed, or empty (< 8 bytes: killed before its first flush);
        # neither loses an event. Anything else is damage.
        bad = [p for p in rec.problems
               if not (p.problem == "unsealed" or (p.problem == "truncated" and p.rows_read == 0 and p.bytes_unread < 8))]
        res["open_ok"] = not bad
        res["open_problems"] = [f"{p.path}: {p.problem}" for p in bad][:5]
    except Exception as e:  # noqa: BLE001 - a record that does not open is the finding
        res["open_error"] = repr(e)
        return res
    state, committed_consumed = _replay_drivers(rec, resumed_from, res)
    res["duplicated"] = sum(1 for c in committed_consumed.values() if c > 1)
    final_dir = checkpoint.latest(run_dir)
    final = checkpoint.read_state(final_dir) if final_dir else None
    if final is not None:
        if final["ledger"] != state:
            diff = [s for s in set(final["ledger"]) | set(state) if final["ledger"].get(s) != state.get(s)]
            res["final_mismatch"] = len(diff)
            res["examples"] += [f"{s}: checkpoint {final['ledger'].get(s)} vs record {state.get(s)}" for s in diff[:3]]
        buffered = {s["sample_id"] for g in final["buffer"] for s in g["samples"]}
        cursor = int(final["cursor"])
    else:
        buffered, cursor = set(), None
    counts = Counter(state.values())
    res["generated"] = len(state)
    res["consumed"], res["dropped"] = counts["consumed"], counts["dropped"]
    open_ = [s for s, st in state.items() if st not in TERMINAL]
    res["pending"] = sum(1 for s in open_ if s in buffered and state[s] == "graded")
    lost = [s for s in open_ if not (s in buffered and state[s] == "graded")]
    # completions the generator reported for dispatched prompts must all be in the ledger
    # (in flight on a killed generator and never resubmitted would show here)
    rolled = rec.sql("SELECT DISTINCT sample_id, prompt_id FROM rollout WHERE group_id NOT LIKE 'eval%'").fetchall()
    missing = [sid for sid, pid in rolled if sid not in state and (cursor is None or int(pid) < cursor)]
    res["lost"] = len(lost) + len(missing)
    res["examples"] += [f"lost {s} ({state.get(s)})" for s in (lost + missing)[:3]]
    res["restarts"] = rec.sql("SELECT count(*) FROM incident WHERE fault LIKE 'actor_restart:%'").fetchall()[0][0] \
        if "incident" in _kinds(rec) else 0
    if killed_pids:
        procs = {int(p.pid): p for p in rec.processes if p.pid}
        killed = [procs.get(int(pid)) for pid in killed_pids if pid]
        res["killed_lost"] = sum(1 for p in killed if p is not None and p.status == "lost")
        res["killed_total"] = len([p for p in killed_pids if p])
        if doctor:
            from rlobs.doctor import diagnose

            report = diagnose(rec)
            named = {e.metric for f in report.findings if f.rule == "record-damaged" for e in f.evidence}
            res["doctor_reported"] = all(p is not None and f"process {p.process}" in named for p in killed)
            res["doctor_rules"] = [f.rule for f in report.findings]
    ok = (res["open_ok"] and res["illegal"] == 0 and res["lost"] == 0 and res["duplicated"] == 0
          and not res.get("final_mismatch") and res["doctor_reported"] is not False)
    res["ok"] = bool(ok)
    return res


def _kinds(rec: Any) -> set[str]:
    try:
        return {r[0] for r in rec.sql("SELECT table_name FROM information_schema.tables").fetchall()}
    except Exception:  # noqa: BLE001
        return set()


def dumps(res: dict[str, Any]) -> str:
    return json.dumps(res, indent=1, default=str)
