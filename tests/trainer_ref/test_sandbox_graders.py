"""The bubblewrap sandbox refuses escapes; graders return exact rewards and honour timeouts."""

from __future__ import annotations

import signal

import pytest

from trainer_ref import sandbox
from trainer_ref.graders import GraderWorker, code_program, grade_code, grade_exact, grade_rule

needs_bwrap = pytest.mark.skipif(not sandbox.available(), reason="bwrap/prlimit not installed")


@needs_bwrap
def test_sandbox_runs_code():
    r = sandbox.run_python("print(6*7)")
    assert (r.returncode, r.stdout, r.timed_out) == (0, "42\n", False)


@needs_bwrap
def test_sandbox_refuses_network():
    r = sandbox.run_python(
        "import socket\ns=socket.socket()\ns.settimeout(2)\ntry:\n s.connect(('1.1.1.1',53))\n print('CONNECTED')\n"
        "except OSError as e:\n print('refused', e.errno)\n")
    assert "CONNECTED" not in r.stdout and r.stdout.startswith("refused")


@needs_bwrap
@pytest.mark.parametrize("path", ["/etc/passwd", "/root/.ray/auth_token", "/work", "/home"])
def test_sandbox_hides_files_outside_its_dir(path):
    r = sandbox.run_python(f"import os\nprint(os.path.exists({path!r}))")
    assert r.stdout == "False\n"


@needs_bwrap
def test_sandbox_cannot_write_its_code_dir():
    r = sandbox.run_python("open('/sandbox/x','w').write('x')")
    assert r.returncode != 0 and "Read-only file system" in r.stderr


@needs_bwrap
def test_sandbox_kills_infinite_loop_and_limits_memory():
    # The CPU limit, not the wall clock, kills a spinner: the wall-clock limit is far off (a loaded machine may take
    # several wall seconds to give it its one CPU second), and RLIMIT_CPU's hard limit ends it with SIGKILL.
    r = sandbox.run_python("while True: pass", timeout_s=60, cpu_s=1)
    assert not r.timed_out and r.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL, -signal.SIGXCPU,
                                                128 + signal.SIGXCPU), r
    assert r.seconds < 60
    r = sandbox.run_python("import time\ntime.sleep(30)", timeout_s=1, cpu_s=5)
    assert r.timed_out and r.seconds < 15.0  # wall-clock limit kills a sleeper long before its 30 s are up
    r = sandbox.run_python("x = bytearray(2 << 30)", mem_mb=256)
    assert r.returncode != 0 and "MemoryError" in r.stderr


def _s(completion, answer=82, finish="stop"):
    return {"sample_id": "x", "completion": completion, "answer": answer, "finish_reason": finish, "prompt": "37+45="}


def test_exact_and_rule_graders():
    assert grade_exact(_s("#82")) == 1.0 and grade_exact(_s("#81")) == 0.0 and grade_exact(_s("82")) == 0.0
    assert grade_rule(_s("#82")) == 1.0
    assert grade_rule(_s("#83")) == 0.1 + 0.4 * 0.5  # tens digit right
    assert grade_rule(_s("#17")) == 0.1
    assert grade_rule(_s("#182")) == 0.1 + 0.4 * (2 / 3)
    assert grade_rule(_s("8,2#82x")) == 0.0
    assert grade_rule(_s("#82", finish="length")) == 0.0


@needs_bwrap
def test_code_grader_executes_the_answer_in_the_sandbox():
    assert grade_code(_s("#82")) == 1.0
    assert grade_code(_s("#80")) == 0.0
    evil = _s("#__import__('os').listdir('/work')")
    assert "listdir" in code_program(evil) and grade_code(evil) == 0.0


def test_grader_worker_timeout_and_error_outcomes():
    w = GraderWorker("exact", timeout_s=0.5, init_telemetry=False)
    w._one = lambda s, step=None: (  # type: ignore[method-assign]
        __import__("time").sleep(2) if s["sample_id"] == "slow" else 1 / 0)
    out = w.grade([{**_s("#82"), "sample_id": "slow"}, {**_s("#82"), "sample_id": "bad"}])
    assert [o["outcome"] for o in out] == ["timeout", "error"]
    assert out[0]["reward"] is None and "ZeroDivisionError" in out[1]["error"]
