"""The on-call scenarios, on real trainer_ref processes sharing one Ray cluster and one set of actors.

    python tests/dashboards/drive_oncall.py BASE_DIR

In order, each in its own run directory under BASE_DIR (created by the test before Prometheus starts):

1. ``healthy-sync``, ``healthy-colocate_async``, ``healthy-separate_async``: clean runs to the end;
2. ``slow-grader``: every grader call sleeps 4 s (the pool saturates); held at step 4 until the test
   says ``go`` on stdin (it watches for the grader alert meanwhile);
3. ``kill-grader``: a grader actor's process is SIGKILLed at step 2 (Ray restarts it); held at step 4
   until ``go``;
4. ``stop-generator``: the generator's process is SIGSTOPped at step 4; the trainer starves; on ``go``
   it gets SIGCONT and the run finishes.

Every step and event is reported on the test's status pipe (tests.status_channel), never on stdout.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.status_channel import report  # noqa: E402

SMALL = dict(groups_per_step=4, group_size=4, max_tokens=48, eval_prompts=4, eval_every=0, progress=False,
             prometheus=True, grader_timeout_s=10.0)
HEALTHY_MODES = ("sync", "colocate_async", "separate_async")


def _pid(run_dir: Path, component: str) -> int:
    for p in sorted((run_dir / "processes").glob("*.json")):
        info = json.loads(p.read_text())
        if info.get("component") == component and not info.get("ended_ns"):
            return int(info["pid"])
    raise RuntimeError(f"no live {component} process in {run_dir}")


def _wait_go() -> None:
    line = sys.stdin.readline()
    if line.strip() != "go":
        raise SystemExit(f"expected 'go' on stdin, got {line!r}")


def main() -> int:
    base = Path(sys.argv[1])
    from trainer_ref.config import Config
    from trainer_ref.model_build import tokenizer_hash
    from trainer_ref.run import resolve_model, start_actors, start_ray, stop_actors, train

    first = Config(run_dir=str(base / "_actors"), mode="separate_async", **SMALL)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(first.kv_cache_gb))
    model_dir = resolve_model(first)
    start_ray(first)
    hashes = {"tokenizer": tokenizer_hash(model_dir), "sampling": f"T={first.temperature},max={first.max_tokens}"}
    actors = start_actors(first, model_dir, hashes)

    def run(name: str, mode: str, steps: int, on_step=None, **extra) -> None:  # noqa: ANN001
        cfg = Config(run_dir=str(base / name), mode=mode, steps=steps, **{**SMALL, **extra})

        def step_hook(out: dict) -> None:
            report({"event": "step", "run": name, "step": out["step"], "t": time.time()})
            if on_step is not None:
                on_step(cfg, out)

        train(cfg, actors, model_dir, on_step=step_hook)
        report({"event": "ended", "run": name, "t": time.time()})

    for mode in HEALTHY_MODES:
        run(f"healthy-{mode}", mode, 8)

    def hold_at(step: int):  # noqa: ANN202
        def hook(cfg: Config, out: dict) -> None:
            if out["step"] == step:
                report({"event": "holding", "run": Path(cfg.run_dir).name, "t": time.time()})
                _wait_go()
        return hook

    run("slow-grader", "separate_async", 6, on_step=hold_at(4), fault="slow_grader", fault_onset=0,
        fault_magnitude=4.0)

    def kill_then_hold(cfg: Config, out: dict) -> None:
        run_dir = Path(cfg.run_dir)
        if out["step"] == 2:
            pid = _pid(run_dir, "grader")
            os.kill(pid, signal.SIGKILL)
            report({"event": "killed", "run": run_dir.name, "component": "grader", "pid": pid, "t": time.time()})
        elif out["step"] == 4:
            report({"event": "holding", "run": run_dir.name, "t": time.time()})
            _wait_go()

    run("kill-grader", "separate_async", 6, on_step=kill_then_hold)

    def stop_generator(cfg: Config, out: dict) -> None:
        if out["step"] != 4:
            return
        run_dir = Path(cfg.run_dir)
        pid = _pid(run_dir, "generator")
        os.kill(pid, signal.SIGSTOP)
        report({"event": "stopped", "run": run_dir.name, "component": "generator", "pid": pid, "t": time.time()})

        import threading

        def resume() -> None:  # the trainer starves in train(); the test's "go" resumes the generator
            _wait_go()
            os.kill(pid, signal.SIGCONT)
            report({"event": "continued", "run": run_dir.name, "t": time.time()})

        threading.Thread(target=resume, daemon=True).start()

    run("stop-generator", "separate_async", 12, on_step=stop_generator)
    stop_actors(actors)
    import ray

    ray.shutdown()
    report({"event": "done", "t": time.time()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
