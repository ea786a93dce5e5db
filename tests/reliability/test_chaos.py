"""Chaos with a ledger, for real: actors and the driver of a separate_async run are killed, and the run
record must still account for every sample exactly once (trainer_ref.chaos.check_run).

* a grader SIGKILLed and the generator ``ray.kill``ed during one run on real Ray actors and a real vLLM
  engine: Ray restarts them, the orchestrator waits, re-syncs the weights to the new engine, resubmits
  and re-grades; nothing lost or consumed twice, the restarts are incidents, the doctor names the
  killed processes, and the restarted engine samples with the trainer's weights (not its initial ones);
* the driver SIGKILLed after a checkpoint (a subprocess; its actors die with it) and resumed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainer_ref.conftest import SMALL, small_config

pytestmark = [pytest.mark.slow, pytest.mark.heavy]
ROOT = Path(__file__).resolve().parents[2]


def _driver_cmd(run_dir: Path, steps: int) -> list[str]:
    c = [sys.executable, "-m", "trainer_ref.run", "--mode", "separate_async", "--steps", str(steps), "--run-dir",
         str(run_dir), "--checkpoint-every", "2", "--no-progress"]
    for k, v in SMALL.items():
        if k != "progress":
            c += ["--" + k.replace("_", "-"), str(v)]
    return c


def test_driver_sigkill_then_resume_accounts_for_every_sample(tmp_path, chaos_stack_factory):
    """Runs first, before this module starts its own Ray: the subprocess starts its own cluster."""
    import psutil

    from trainer_ref import checkpoint
    from trainer_ref.chaos import check_run
    from trainer_ref.run import train

    run_dir, steps = tmp_path / "driver", 10
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": "local"}
    proc = subprocess.Popen(_driver_cmd(run_dir, steps), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 400
        while time.time() < deadline and proc.poll() is None:
            d = checkpoint.latest(run_dir)
            if d is not None and d.name != "step_000000" and int(d.name.split("_")[1]) >= 2:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the driver finished before the kill"
        tree = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(3)
    for p in tree:  # Ray's processes started by the killed driver (by pid)
        try:
            p.kill()
        except psutil.Error:
            pass
    resumed_from = checkpoint.latest(run_dir)
    assert resumed_from is not None
    # the resume runs in this process on fresh actors (reused by the next test)
    actors, model_dir = chaos_stack_factory()
    summary = train(small_config(run_dir, mode="separate_async", steps=steps, checkpoint_every=2, resume=True),
                    actors=actors, model_dir=model_dir)
    assert summary["resumed"] and summary["steps"] == steps
    res = check_run(run_dir, killed_pids=[proc.pid], resumed_from=[resumed_from])
    assert res["open_ok"], res
    assert res["lost"] == 0 and res["duplicated"] == 0 and res["illegal"] == 0, res
    assert not res.get("final_mismatch"), res
    assert res["killed_lost"] == 1 and res["doctor_reported"], res
    assert res["consumed"] >= steps * SMALL["groups_per_step"] * SMALL["group_size"] - 1


def test_grader_and_generator_killed_mid_run_are_recovered(tmp_path, chaos_stack_factory):
    import ray

    from rlobs.store import open_run
    from trainer_ref.chaos import Injector, check_run
    from trainer_ref.run import train

    actors, model_dir = chaos_stack_factory()
    run_dir = tmp_path / "actors"
    inj = Injector(actors, [(2, "grader0", "sigkill"), (5, "generator", "ray_kill")], seed=1)
    summary = train(small_config(run_dir, mode="separate_async", steps=12), actors=actors, model_dir=model_dir,
                    on_step=inj)
    inj.join()
    assert summary["steps"] == 12
    assert [k["target"] for k in inj.killed if k.get("pid")] == ["grader0", "generator"], inj.killed
    res = check_run(run_dir, killed_pids=[k["pid"] for k in inj.killed])
    assert res["open_ok"], res
    assert res["lost"] == 0 and res["duplicated"] == 0 and res["illegal"] == 0, res
    assert not res.get("final_mismatch"), res
    assert res["killed_lost"] == 2 and res["doctor_reported"], res  # both killed processes reported lost
    rec = open_run(run_dir)
    inc = dict(rec.sql("SELECT fault, count(*) FROM incident GROUP BY 1").fetchall())
    assert inc == {"actor_restart:grader": 1, "actor_restart:generator": 1}, inc
    # the restarted engine was re-synced: it never tagged (or sampled with) its initial weights
    import json

    detail = json.loads(rec.sql("SELECT detail FROM incident WHERE fault = 'actor_restart:generator'").fetchall()[0][0])
    assert detail["resynced_version"] >= 1
    new_pid = int(detail["new"].split(":")[0])
    new_proc = [p.process for p in rec.processes if p.component == "generator" and int(p.pid or 0) == new_pid]
    assert new_proc, "the restarted generator records into this run"
    lo = rec.sql("SELECT min(dispatch_version), count(*) FROM rollout WHERE process = ?", [new_proc[0]]).fetchall()[0]
    assert lo[1] > 0 and lo[0] >= detail["resynced_version"], lo
    assert ray.get(actors["generator"].stats.remote())["version"] == summary["version"]


def test_grader_that_keeps_dying_exhausts_regradings_and_drops_with_a_reason(tmp_path, chaos_stack_factory):
    """A poison prompt kills every grader that grades it (fault ``grader_crash``): the orchestrator
    re-grades MAX_GRADE_ATTEMPTS times, then drops that grading call's groups with ``grader_error``
    (a reason in the ledger schema; it used to be ``grader_lost``, which killed the dispatcher). The
    run finishes, every sample ends consumed or dropped, nothing is lost or consumed twice."""
    from rlobs.store import open_run
    from trainer_ref.chaos import check_run
    from trainer_ref.orchestrator import MAX_GRADE_ATTEMPTS
    from trainer_ref.run import train

    actors, model_dir = chaos_stack_factory()
    run_dir, steps = tmp_path / "poison", 5
    summary = train(small_config(run_dir, mode="separate_async", steps=steps, fault="grader_crash",
                                 fault_magnitude=5), actors=actors, model_dir=model_dir)
    assert summary["steps"] == steps
    rec_ = summary["recovery"]
    assert rec_["grader_lost_samples"] >= SMALL["group_size"], rec_  # at least the poison group
    assert rec_["regraded_groups"] >= MAX_GRADE_ATTEMPTS - 1, rec_
    res = check_run(run_dir)
    assert res["open_ok"], res
    assert res["lost"] == 0 and res["duplicated"] == 0 and res["illegal"] == 0, res
    assert not res.get("final_mismatch"), res
    rec = open_run(run_dir)
    poison = rec.sql("SELECT state, reason, count(*) FROM ledger WHERE component = 'driver' AND group_id = 'p5' "
                     "AND state IN ('consumed', 'dropped') GROUP BY 1, 2").fetchall()
    assert poison == [("dropped", "grader_error", SMALL["group_size"])], poison
    assert summary["dropped"].get("grader_error", 0) >= rec_["grader_lost_samples"]
    n_restarts = rec.sql("SELECT count(*) FROM incident WHERE fault = 'actor_restart:grader'").fetchall()[0][0]
    assert n_restarts >= MAX_GRADE_ATTEMPTS, n_restarts


@pytest.fixture(scope="module")
def chaos_stack_factory(tiny_model_dir, tmp_path_factory):
    """This module's own actors (restartable; started on first use, after the driver-kill subprocess)."""
    held: dict = {}

    def get():
        if not held:
            from trainer_ref.config import Config
            from trainer_ref.model_build import tokenizer_hash
            from trainer_ref.run import start_actors, start_ray

            cfg = small_config(tmp_path_factory.mktemp("chaos_session"), max_restarts=-1)
            assert isinstance(cfg, Config)
            start_ray(cfg)
            held.update(actors=start_actors(cfg, tiny_model_dir, {"tokenizer": tokenizer_hash(tiny_model_dir)}))
        return held["actors"], tiny_model_dir

    yield get
    if held:
        from trainer_ref.run import stop_actors

        stop_actors(held["actors"])


@pytest.fixture(scope="module")
def tiny_model_dir() -> str:
    from trainer_ref.model_build import build_tiny

    return str(build_tiny())
