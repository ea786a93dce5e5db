"""`rlobs follow`: a growing verl JSONL tailed into a run record exactly once, through partial lines,
truncation, rotation and its own SIGKILL + restart; and, against a real Prometheus, the planted problem's
alert fires within 3 scrape intervals of the line that carries it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rlobs
from rlobs.importers.follow import Follower

REPO = Path(__file__).resolve().parents[2]


def line(step: int, grad: float | None = None) -> bytes:
    g = 0.3 + 0.01 * (step % 5) if grad is None else grad
    return (json.dumps({"step": step, "data": {"actor/grad_norm": g, "actor/pg_loss": -0.01,
                                               "critic/score/mean": 0.1, "timing_s/step": 20.0}}) + "\n").encode()


def steps_in(run: Path) -> list[int]:
    with rlobs.open_run(run) as rec:
        return [s for (s,) in rec.sql("SELECT step FROM train_step ORDER BY step").fetchall()]


def test_partial_lines_rotation_and_truncation_each_line_once(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_bytes(b"".join(line(s) for s in range(1, 6)) + line(6)[:20])  # step 6 half written
    f = Follower("verl", log, tmp_path / "run", prometheus=False)
    f.start()
    f.poll_once()
    assert f.lines == 5
    with log.open("ab") as fh:
        fh.write(line(6)[20:] + line(7) + b"{not json\n" + line(8))
    f.poll_once()
    assert f.lines == 9
    with log.open("ab") as fh:  # written, then rotated before the follower saw them
        fh.write(line(9) + line(10))
    os.rename(log, tmp_path / "metrics.jsonl.1")
    log.write_bytes(line(11) + line(12))
    for _ in range(3):
        f.poll_once()
    with log.open("r+b") as fh:  # copytruncate: the file is emptied in place, then written again
        fh.truncate(0)
    f.poll_once()
    log.write_bytes(line(13))
    for _ in range(2):
        f.poll_once()
    f.close()
    assert steps_in(tmp_path / "run") == list(range(1, 14))
    report = json.loads((tmp_path / "run" / "follow_report.json").read_text())
    assert [i["problem"] for i in report["issues"]] == ["malformed"]
    notes = " ".join(report["notes"])
    assert "rotated" in notes and "truncated" in notes


WRITER = """
import json, sys, time
path, n, delay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
for s in range(1, n + 1):
    with open(path, "ab") as fh:
        rec = json.dumps({"step": s, "data": {"actor/grad_norm": 0.3, "critic/score/mean": 0.1}}) + "\\n"
        fh.write(rec[:15].encode()); fh.flush(); time.sleep(delay / 2)  # a partial line for a while
        fh.write(rec[15:].encode())
    time.sleep(delay / 2)
"""


def _follow(log: Path, run: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([sys.executable, "-m", "rlobs.cli", "follow", "verl", str(log), "--out", str(run),
                          "--poll", "0.05", *extra], stdout=subprocess.PIPE, text=True, env=env)
    assert json.loads(p.stdout.readline())["following"] == str(log)
    return p


def test_killed_and_restarted_follow_loses_and_duplicates_nothing(tmp_path):
    log, run = tmp_path / "metrics.jsonl", tmp_path / "run"
    log.touch()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), "150", "0.04"])
    try:
        for round_ in range(3):  # SIGKILL twice mid-stream, restart each time
            p = _follow(log, run, "--metrics-port", "0")
            time.sleep(1.5 + round_)
            p.send_signal(signal.SIGKILL if round_ < 2 else signal.SIGTERM)
            p.wait(timeout=30)
        assert writer.wait(timeout=120) == 0
        p = _follow(log, run)
        deadline = time.time() + 60
        while time.time() < deadline:
            state = json.loads((run / "follow_state.json").read_text())
            if state["offset"] == log.stat().st_size:
                break
            time.sleep(0.2)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
    finally:
        writer.kill()
    got = steps_in(run)
    assert got == list(range(1, 151)), f"missing {sorted(set(range(1, 151)) - set(got))}, " \
                                       f"{len(got) - len(set(got))} duplicate(s)"


@pytest.mark.slow
def test_a_real_prometheus_alert_fires_within_3_scrape_intervals_of_the_line(tmp_path):
    from rlobs.dashboards.observe import LocalPrometheus

    if shutil.which("prometheus") is None:
        pytest.fail("prometheus is required (apt-get install prometheus)")
    log, run = tmp_path / "metrics.jsonl", tmp_path / "run"
    log.write_bytes(b"".join(line(s) for s in range(1, 6)))
    p = _follow(log, run)
    scrape = 2.0
    try:
        with LocalPrometheus([run], port=0, scrape_interval=f"{scrape:g}s") as prom:
            run_id = json.loads((run / "manifest.json").read_text())["run_id"]
            deadline = time.time() + 60  # wait until Prometheus scrapes the follower
            while time.time() < deadline and not prom.query(f'rlobs_train_steps_total{{run="{run_id}"}}'):
                with log.open("ab") as fh:
                    fh.write(line(6 + int(time.time()) % 1000))
                time.sleep(0.5)
            assert prom.query(f'rlobs_train_steps_total{{run="{run_id}"}}'), prom.log_tail()
            time.sleep(2 * scrape)
            assert not [a for a in prom.alerts() if a["labels"].get("run") == run_id]
            with log.open("ab") as fh:  # the planted problem: a NaN gradient norm
                fh.write(line(5000, grad=float("nan")))
            t_line = time.time()
            fired = None
            while time.time() < t_line + 10 * scrape:
                alerts = [a for a in prom.alerts() if a["labels"].get("run") == run_id
                          and a["labels"]["alertname"] == "RlobsGradNormNonfinite" and a["state"] == "firing"]
                if alerts:
                    fired = time.time() - t_line
                    break
                time.sleep(0.1)
            assert fired is not None, prom.log_tail()
            assert fired <= 3 * scrape, f"alert fired {fired:.1f} s after the line (3 scrape intervals: {3 * scrape} s)"
            print(f"RlobsGradNormNonfinite firing {fired:.2f} s after the line was written (scrape {scrape} s)")
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)


def test_tensorboard_folder_followed_step_by_step_and_resumed_without_duplicates(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    tb, run = tmp_path / "tb", tmp_path / "run"
    w = SummaryWriter(log_dir=str(tb))

    def write(steps):
        for s in steps:
            for k, v in (("actor/grad_norm", 0.3 + s / 100), ("actor/pg_loss", -0.01), ("critic/score/mean", 0.1)):
                w.add_scalar(k, v, s)
        w.flush()

    write(range(1, 11))
    f = Follower("tensorboard", tb, run, framework="verl", prometheus=False)
    f.hold_s = 0.0
    f.start()
    f.poll_once()
    f.poll_once()  # idle: the held last step is emitted
    write(range(11, 16))
    f.poll_once()
    f.close()  # stop (the held step is emitted on close)
    write(range(16, 21))
    w.close()
    g = Follower("tensorboard", tb, run, framework="verl", prometheus=False)
    g.hold_s = 0.0
    g.start()
    for _ in range(3):
        g.poll_once()
    g.close()
    with rlobs.open_run(run) as rec:
        rows = rec.sql("SELECT step, grad_norm FROM train_step ORDER BY step").fetchall()
    assert [s for s, _ in rows] == list(range(1, 21))
    assert all(abs(g_ - (0.3 + s / 100)) < 1e-6 for s, g_ in rows)


def test_trl_output_folder_followed_across_checkpoints_and_a_restart(tmp_path):
    from transformers import TrainerState

    out, run = tmp_path / "out", tmp_path / "run"

    def checkpoint(n: int) -> None:
        state = TrainerState(global_step=n, max_steps=100, logging_steps=1)
        state.log_history = [{"loss": 0.1, "grad_norm": 0.2 + s / 100, "reward": 0.5, "step": s} for s in range(1, n + 1)]
        (out / f"checkpoint-{n}").mkdir(parents=True)
        state.save_to_json(str(out / f"checkpoint-{n}" / "trainer_state.json"))

    checkpoint(2)
    f = Follower("trl", out, run, prometheus=False)
    f.start()
    assert f.poll_once() == 2
    checkpoint(4)
    assert f.poll_once() == 2 and f.poll_once() == 0
    f.close()
    checkpoint(6)
    g = Follower("trl", out, run, prometheus=False)
    g.start()
    assert g.poll_once() == 2
    g.close()
    with rlobs.open_run(run) as rec:
        rows = rec.sql("SELECT step, grad_norm FROM train_step ORDER BY step").fetchall()
    assert rows == [(s, pytest.approx(0.2 + s / 100)) for s in range(1, 7)]


def test_wandb_run_file_followed_as_it_grows_and_across_a_restart(tmp_path):
    pytest.importorskip("wandb")
    from tests.importers import fixtures as fx

    src = fx.write_wandb_sdk_run(tmp_path / "sdk", "verl", steps=30)
    (run_file,) = src.glob("run-*.wandb")
    data = run_file.read_bytes()
    live = tmp_path / "live" / "offline-run-x"
    live.mkdir(parents=True)
    target = live / run_file.name
    cut1, cut2 = len(data) // 3 + 5, 2 * len(data) // 3 + 11  # both mid-record
    target.write_bytes(data[:cut1])
    f = Follower("wandb", tmp_path / "live", tmp_path / "run", framework="verl", prometheus=False)
    f.start()
    f.poll_once()
    with target.open("ab") as fh:
        fh.write(data[cut1:cut2])
    f.poll_once()
    f.close()
    with target.open("ab") as fh:
        fh.write(data[cut2:])
    g = Follower("wandb", tmp_path / "live", tmp_path / "run", framework="verl", prometheus=False)
    g.start()
    g.poll_once()
    g.close()
    with rlobs.open_run(tmp_path / "run") as rec:
        rows = rec.sql("SELECT step, grad_norm FROM train_step ORDER BY step").fetchall()
    assert [s for s, _ in rows] == list(range(1, 31))
    assert all(g_ == fx.verl_metrics(s)["actor/grad_norm"] for s, g_ in rows)
    assert json.loads((tmp_path / "run" / "follow_report.json").read_text())["issues"] == []
