"""Prometheus target files: one per live process, removed at a clean close, reaped after a death."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

from rlobs.events import WriterInfo
from rlobs.sinks.targets import GRACE_S, TargetFile, reap_dead


def _file(sd_dir, name: str, pid: int, host: str, age_s: float):
    path = sd_dir / f"{name}.json"
    path.write_text(json.dumps([{"targets": ["127.0.0.1:1"], "labels": {
        "run": "r", "component": "grader", "rank": "0", "__meta_rlobs_host": host, "__meta_rlobs_pid": str(pid)}}]))
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    return proc.pid


def test_reaper_removes_only_dead_processes_of_this_host_past_the_grace(tmp_path):
    host, dead = socket.gethostname(), _dead_pid()
    gone = _file(tmp_path, "dead-old", dead, host, GRACE_S + 5)
    recent = _file(tmp_path, "dead-recent", dead, host, 5)  # its alert must get the time to fire
    alive = _file(tmp_path, "alive-old", os.getpid(), host, GRACE_S + 5)
    elsewhere = _file(tmp_path, "other-host", dead, host + "-not-this-one", GRACE_S + 5)
    (tmp_path / "garbage.json").write_text("{not json")
    assert reap_dead(tmp_path) == [gone]
    assert recent.exists() and alive.exists() and elsewhere.exists() and (tmp_path / "garbage.json").exists()


def test_a_process_target_file_lives_with_the_process(tmp_path):
    info = WriterInfo(run_id="run-7", process="trainer-r1-123-ab", component="trainer", rank=1)
    tf = TargetFile(tmp_path, info, "127.0.0.1:9999")
    doc = json.loads(tf.path.read_text())[0]
    assert doc["targets"] == ["127.0.0.1:9999"]
    assert {k: v for k, v in doc["labels"].items() if not k.startswith("__")} == \
        {"run": "run-7", "component": "trainer", "rank": "1"}
    assert doc["labels"]["__meta_rlobs_pid"] == str(os.getpid())
    tf.close()
    assert not tf.path.exists()
