"""Run the reference trainer with /metrics served from every process, and hold it at its last step.

    python tests/dashboards/drive_trainer_ref.py RUN_DIR [--fault NAME] [--steps N] [--onset K]

Trains ``separate_async`` on the tiny model with ``--prometheus`` (driver, trainer, generator and grader
processes each serve /metrics and write their ``prometheus_sd`` target file into RUN_DIR). After the first step
it reports ``{"first_step": true, "run_id": ...}`` and waits for a line on stdin (the test's Prometheus has scraped
every process by then, so the later steps' counts are seen rising, also on a loaded machine). At the last
step, while every process is still up, it reports ``{"ready": true, "run_id": ...}`` on the test's status
pipe (``tests.status_channel``; stdout is not a protocol) and waits until its stdin closes (the test has
finished querying Prometheus); then the run ends normally and it reports the summary (steps, telemetry drops).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.status_channel import report  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--fault", default="")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--onset", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    from trainer_ref.config import Config
    from trainer_ref.run import train

    cfg = Config(mode="separate_async", steps=a.steps, run_dir=a.run_dir, seed=a.seed, prometheus=True,
                 progress=False, fault=a.fault, fault_onset=a.onset, eval_prompts=8,
                 # held-out evaluations at steps 4 and 8 too, not only at the start and end: the run is held at its
                 # last step, and the gauges of the evaluations after the first (rlobs_heldout_success_best,
                 # _recent) need one before it
                 eval_every=4)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg.kv_cache_gb))

    def hold(out: dict) -> None:
        import rlobs

        if out["step"] == 0 and cfg.steps > 1:
            # after the first step every process is up and has counted something: the test waits until its
            # Prometheus has scraped them, so the later steps' counts are seen as increases (a rate over the run)
            report({"first_step": True, "run_id": rlobs.get_recorder().info.run_id})
            sys.stdin.readline()
            return
        if out["step"] + 1 < cfg.steps:
            return
        report({"ready": True, "run_id": rlobs.get_recorder().info.run_id, "step": out["step"]})
        sys.stdin.read()  # until the test closes our stdin

    summary = train(cfg, on_step=hold)
    report({"steps": summary["steps"], "telemetry_dropped": summary["telemetry_dropped"], "ledger": summary["ledger"]})
    import ray

    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
