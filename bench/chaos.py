"""Chaos with a ledger: seeded schedules that kill the generator, graders or the driver of short
separate_async runs, each followed by a Jepsen-style check of the run record.

    python bench/chaos.py [--schedules 20] [--seed 0] [--steps 24] [--only generator,grader,both,driver]

Schedule kinds (seeded random: which step, which actor, ``ray.kill(no_restart=False)`` or SIGKILL of
the actor's pid from Ray's actor table, a random delay inside the step):

* ``grader``: one or two grader kills; ``generator``: one generator kill; ``both``: a grader and the
  generator killed in the same step; ``poison`` (one, after the rotation): a prompt that kills every
  grader that grades it (fault ``grader_crash``): re-gradings are exhausted and its groups dropped
  ``grader_error``, nothing lost, the run finishes. These run in this process on one Ray cluster and one set of
  actors (``train(cfg, actors=...)``), restarted by Ray and recovered by the orchestrator.
* ``driver``: the trainer driver (``python -m trainer_ref.run --checkpoint-every 2``, a subprocess with
  its own Ray cluster) is SIGKILLed after a random checkpoint (its Ray actors die with it), then
  resumed with ``python -m trainer_ref.run --resume`` in the same run directory (``--resume-in-process``:
  ``train(cfg, actors=...)`` with ``resume=True`` on the reused actors, one Ray + vLLM start less).

After each schedule ``trainer_ref.chaos.check_run`` replays the ledger of every driver invocation
and the checkpoints: lost (must be 0), duplicated (must be 0), illegal transitions, the record opens
with page checksums verified, the doctor reports every killed process. Prints and saves
``bench/results/chaos.json`` and ``chaos.md``; ``--recheck`` runs the checker again over the saved run
directories.

Besides lost / duplicated: ``pending_in_checkpoint`` are graded samples in the final checkpoint's buffer
(the next resume consumes them); ``rolled_back_by_resume`` are samples the killed driver touched after
the checkpoint it was resumed from (the resume regenerates them, same ids); ``unrecorded_before_kill``
are transitions the checkpoint holds but the killed driver's record lacks (its recorder's unflushed
queue, the gap the doctor's ``record-damaged`` reports).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SMALL = dict(groups_per_step=4, group_size=4, max_tokens=64, eval_prompts=8, progress=False, grader_workers=2)
KIND_ORDER = ("driver", "grader", "generator", "both", "poison")


def plan_schedules(n: int, seed: int, steps: int, only: set[str] | None) -> list[dict[str, Any]]:
    """n schedules, kinds in rotation (about 1/5 driver kills), everything else seeded random."""
    rng = random.Random(seed)
    rotation = ["grader", "generator", "both", "grader", "driver"]
    out = []
    for i in range(n):
        kind = rotation[i % len(rotation)]
        if only and kind not in only:
            continue
        s: dict[str, Any] = {"id": i, "kind": kind, "seed": rng.randrange(1 << 30)}
        hows = ("ray_kill", "sigkill")
        if kind == "grader":
            k = rng.choice((1, 2))
            s["plan"] = sorted((rng.randint(2, steps - 6), f"grader{rng.randrange(2)}", rng.choice(hows)) for _ in range(k))
            if k == 2 and abs(s["plan"][0][0] - s["plan"][1][0]) < 4:  # let the first recovery finish
                s["plan"][1] = (min(steps - 5, s["plan"][0][0] + 4), *s["plan"][1][1:])
        elif kind == "generator":
            s["plan"] = [(rng.randint(2, steps - 6), "generator", rng.choice(hows))]
        elif kind == "both":
            st = rng.randint(2, steps - 6)
            s["plan"] = [(st, "generator", rng.choice(hows)), (st, f"grader{rng.randrange(2)}", rng.choice(hows))]
        else:
            s["kill_after_checkpoint"] = rng.choice((2, 4, 6))
            s["delay_s"] = round(rng.uniform(0.0, 0.6), 3)
        out.append(s)
    if only is None or "poison" in only:  # one more: a grader that keeps dying, re-gradings exhausted
        out.append({"id": n, "kind": "poison", "seed": rng.randrange(1 << 30), "plan": [],
                    "poison_prompt": rng.randint(4, 4 * (steps - 6))})
    return out


# ----- in-process schedules (actors killed, Ray restarts them) -----------------------------------
def run_actor_schedule(s: dict[str, Any], actors: dict[str, Any], model_dir: str, out_dir: Path,
                       steps: int) -> dict[str, Any]:
    from trainer_ref.chaos import Injector, check_run
    from trainer_ref.config import Config
    from trainer_ref.run import train

    run_dir = out_dir / f"s{s['id']:02d}-{s['kind']}"
    poison = dict(fault="grader_crash", fault_magnitude=s["poison_prompt"]) if s["kind"] == "poison" else {}
    cfg = Config(run_dir=str(run_dir), mode="separate_async", steps=steps, seed=s["seed"] % 1000, max_restarts=-1,
                 **SMALL, **poison)
    inj = Injector(actors, s["plan"], seed=s["seed"])
    t0 = time.time()
    err = None
    try:
        summary = train(cfg, actors=actors, model_dir=model_dir, on_step=inj)
    except Exception as e:  # noqa: BLE001 - a crashed schedule is a result
        summary, err = {}, repr(e)
    inj.join()
    wall = time.time() - t0
    res = check_run(run_dir, killed_pids=[k["pid"] for k in inj.killed if k.get("pid")])
    res.update(schedule=s["id"], kind=s["kind"], plan=s["plan"], killed=inj.killed, wall_s=round(wall, 1),
               steps=summary.get("steps"), error=err, restarts_driver=len(summary.get("restarts", [])) or None,
               recovery=summary.get("recovery"))
    if s["kind"] == "poison" and not err and not (summary.get("recovery") or {}).get("grader_lost_samples"):
        res["ok"], res["error"] = False, "the poison prompt's grading was never given up (no grader_error drop)"
    return res


# ----- driver kills (subprocess, SIGKILL, --resume) ----------------------------------------------
def _cmd(run_dir: Path, steps: int, seed: int, resume: bool) -> list[str]:
    c = [sys.executable, "-m", "trainer_ref.run", "--mode", "separate_async", "--steps", str(steps),
         "--run-dir", str(run_dir), "--seed", str(seed), "--checkpoint-every", "2", "--no-progress",
         "--max-restarts", "-1"]
    for k, v in SMALL.items():
        if k != "progress":
            c += ["--" + k.replace("_", "-"), str(v)]
    return c + (["--resume"] if resume else [])


def _kill_tree(proc: subprocess.Popen, procs: list[Any]) -> None:
    """SIGKILL the driver, then (after Ray had a moment to reap its actors) the processes it started."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(3)
    for p in procs:
        try:
            p.kill()
        except Exception:  # noqa: BLE001 - already gone
            pass


def run_driver_schedule(s: dict[str, Any], out_dir: Path, steps: int, actors: dict[str, Any] | None = None,
                        model_dir: str | None = None) -> dict[str, Any]:
    """Kill a driver subprocess after a checkpoint; resume in a subprocess too, or (``actors`` given)
    in this process on the reused actors, which saves a Ray + vLLM start."""
    import psutil

    from trainer_ref import checkpoint
    from trainer_ref.chaos import check_run

    run_dir = out_dir / f"s{s['id']:02d}-driver"
    seed = s["seed"] % 1000
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env["RAY_ADDRESS"] = "local"  # its own cluster, never one already running on this machine
    t0 = time.time()
    log = open(out_dir / f"s{s['id']:02d}-driver.log", "w")
    proc = subprocess.Popen(_cmd(run_dir, steps, seed, False), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    want = s["kill_after_checkpoint"]
    killed_pid, resumed_from = None, None
    while proc.poll() is None:
        d = checkpoint.latest(run_dir)
        if d is not None and int(d.name.split("_")[1]) >= want:
            time.sleep(s["delay_s"])
            tree = psutil.Process(proc.pid).children(recursive=True)
            killed_pid = proc.pid
            _kill_tree(proc, tree)
            break
        time.sleep(0.05)
    first_rc = proc.returncode
    if killed_pid is not None and actors is not None:
        from trainer_ref.config import Config
        from trainer_ref.run import train

        resumed_from = checkpoint.latest(run_dir)
        cfg = Config(run_dir=str(run_dir), mode="separate_async", steps=steps, seed=seed, checkpoint_every=2,
                     resume=True, max_restarts=-1, **SMALL)
        try:
            rc = 0 if train(cfg, actors=actors, model_dir=model_dir)["steps"] == steps else 1
        except Exception as e:  # noqa: BLE001 - a failed resume is a result
            print(f"resume failed: {e!r}", file=log, flush=True)
            rc = 1
    elif killed_pid is not None:
        resumed_from = checkpoint.latest(run_dir)
        rc = subprocess.run(_cmd(run_dir, steps, seed, True), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            timeout=900).returncode
    else:
        rc = first_rc
    wall = time.time() - t0
    res = check_run(run_dir, killed_pids=[killed_pid] if killed_pid else [], resumed_from=[resumed_from])
    res.update(schedule=s["id"], kind="driver", plan={"kill_after_checkpoint": want, "delay_s": s["delay_s"]},
               killed=[{"target": "driver", "pid": killed_pid, "resumed_from": str(resumed_from)}],
               wall_s=round(wall, 1), resume_rc=rc, error=None if rc == 0 else f"exit {rc}")
    if killed_pid is None:
        res["error"] = "finished before the kill"
    return res


# ----- report -----------------------------------------------------------------------------------
def summarise(results: list[dict[str, Any]], wall: float) -> dict[str, Any]:
    killed = [r for r in results if r.get("killed_total")]
    return {
        "schedules": len(results), "by_kind": {k: sum(r["kind"] == k for r in results) for k in KIND_ORDER},
        "ok": sum(bool(r.get("ok")) and not r.get("error") for r in results),
        "samples_generated": sum(r["generated"] for r in results),
        "consumed": sum(r["consumed"] for r in results), "dropped": sum(r["dropped"] for r in results),
        "pending_in_checkpoint": sum(r["pending"] for r in results),
        "rolled_back_by_resume": sum(r["rolled_back"] for r in results),
        "unrecorded_before_kill": sum(r.get("unrecorded_before_kill", 0) for r in results),
        "lost": sum(r["lost"] for r in results), "duplicated": sum(r["duplicated"] for r in results),
        "illegal_transitions": sum(r["illegal"] for r in results),
        "records_failing_to_open": sum(not r["open_ok"] for r in results),
        "kills": sum(len(r.get("killed", [])) for r in results),
        "restarts_observed": sum(r["restarts"] for r in results),
        "doctor_reported": f"{sum(bool(r.get('doctor_reported')) for r in killed)}/{len(killed)}",
        "errors": [f"s{r['schedule']}: {r['error']}" for r in results if r.get("error")],
        "wall_s": round(wall, 1),
    }


def write_md(path: Path, summ: dict[str, Any], results: list[dict[str, Any]]) -> None:
    lines = ["# Chaos with a ledger", "", f"{summ['schedules']} schedules ({summ['by_kind']}), wall {summ['wall_s']:.0f} s.", "",
             "| figure | value |", "|---|---|"]
    for k in ("samples_generated", "consumed", "dropped", "pending_in_checkpoint", "rolled_back_by_resume",
              "unrecorded_before_kill", "lost",
              "duplicated", "illegal_transitions", "records_failing_to_open", "kills", "restarts_observed",
              "doctor_reported", "ok"):
        lines.append(f"| {k} | {summ[k]} |")
    lines += ["", "| # | kind | plan | generated | lost | dup | restarts | doctor | wall s | error |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['schedule']} | {r['kind']} | {r['plan']} | {r['generated']} | {r['lost']} | {r['duplicated']} | "
                     f"{r['restarts']} | {r.get('doctor_reported')} | {r['wall_s']} | {r.get('error') or ''} |")
    path.write_text("\n".join(lines) + "\n")


def recheck(out: Path) -> None:
    """The checker again over a finished bench's run directories (same kills, same resume points)."""
    from trainer_ref.chaos import check_run

    saved = json.loads((out / "chaos.json").read_text())
    results = []
    for r in saved["schedules"]:
        pids = [k["pid"] for k in r.get("killed", []) if k.get("pid")]
        resumed = [k.get("resumed_from") for k in r.get("killed", []) if k.get("target") == "driver"]
        resumed = [None if x in (None, "None") else x for x in resumed]
        new = check_run(r["run_dir"], killed_pids=pids, resumed_from=resumed)
        keep = {k: r[k] for k in ("schedule", "kind", "plan", "killed", "wall_s", "steps", "error", "resume_rc") if k in r}
        results.append({**new, **keep})
    summ = summarise(results, saved["summary"]["wall_s"])
    summ["rechecked"] = True
    print(json.dumps(summ, indent=1))
    (out / "chaos.json").write_text(json.dumps({"summary": summ, "args": saved["args"], "schedules": results},
                                               indent=1, default=str))
    write_md(out / "chaos.md", summ, results)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--schedules", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--work", default="/tmp/rlobs_chaos")
    ap.add_argument("--resume-in-process", action="store_true",
                    help="driver schedules resume in this process on the reused actors (default: a second "
                         "subprocess with --resume; saves a Ray + vLLM start per schedule)")
    ap.add_argument("--recheck", action="store_true",
                    help="re-run the checker over the run directories of the saved chaos.json (no training)")
    args = ap.parse_args()
    if args.recheck:
        return recheck(Path(args.out))
    import shutil

    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    scheds = plan_schedules(args.schedules, args.seed, args.steps, set(args.only.split(",")) - {""} or None)
    t_all = time.time()
    results: list[dict[str, Any]] = []

    def show(r: dict[str, Any]) -> None:
        print(f"s{r['schedule']:02d} {r['kind']:9s} gen={r['generated']:4d} lost={r['lost']} dup={r['duplicated']} "
              f"illegal={r['illegal']} open={r['open_ok']} restarts={r['restarts']} doctor={r.get('doctor_reported')} "
              f"{r['wall_s']:6.1f}s {r.get('error') or ''}", flush=True)

    if not args.resume_in_process:
        for s in [s for s in scheds if s["kind"] == "driver"]:
            results.append(run_driver_schedule(s, work, args.steps))
            show(results[-1])
    rest = [s for s in scheds if s["kind"] != "driver" or args.resume_in_process]
    if rest:
        import ray

        from trainer_ref.config import Config
        from trainer_ref.model_build import tokenizer_hash
        from trainer_ref.run import resolve_model, start_actors, start_ray, stop_actors

        cfg = Config(run_dir=str(work / "session"), max_restarts=-1, **SMALL)
        model_dir = resolve_model(cfg)
        start_ray(cfg)
        actors = start_actors(cfg, model_dir, {"tokenizer": tokenizer_hash(model_dir)})
        try:
            for s in rest:
                if s["kind"] == "driver":  # killed in a subprocess (its own Ray), resumed here
                    results.append(run_driver_schedule(s, work, args.steps, actors, model_dir))
                else:
                    results.append(run_actor_schedule(s, actors, model_dir, work, args.steps))
                show(results[-1])
        finally:
            stop_actors(actors)
            ray.shutdown()
    results.sort(key=lambda r: r["schedule"])
    summ = summarise(results, time.time() - t_all)
    print(json.dumps(summ, indent=1))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "chaos.json").write_text(json.dumps({"summary": summ, "args": vars(args), "schedules": results},
                                               indent=1, default=str))
    write_md(out / "chaos.md", summ, results)


if __name__ == "__main__":
    main()
