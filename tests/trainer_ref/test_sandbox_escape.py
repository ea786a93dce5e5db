"""Escape attempts against the code-grader sandbox, as an attacker who controls the program would make them.

CI runs these as root under the real bwrap; each asserts containment (issue #21). The program is
hostile; the assertions are made on this side, from what the sandbox let through.
"""

from __future__ import annotations

import os
import resource
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from trainer_ref import sandbox
from trainer_ref.graders import code_program, grade_code

pytestmark = pytest.mark.skipif(not sandbox.available(), reason="bwrap/prlimit/setpriv not installed")


def _run(code: str, **kw) -> sandbox.SandboxResult:
    return sandbox.run_python(code, **kw)


def test_proc_sys_is_not_writable_even_with_the_same_value():
    host_before = Path("/proc/sys/kernel/core_pattern").read_text()
    r = _run("import errno\n"
             "for p, v in (('/proc/sys/kernel/core_pattern', None), ('/proc/sys/vm/drop_caches', '1'),\n"
             "             ('/proc/sys/kernel/hostname', 'pwned')):\n"
             "    try:\n"
             "        v = v if v is not None else open(p).read()\n"
             "        with open(p, 'w') as f: f.write(v)\n"
             "        print('WROTE', p)\n"
             "    except OSError as e:\n"
             "        print('refused', p, errno.errorcode[e.errno])\n")
    assert "WROTE" not in r.stdout and r.stdout.count("refused") == 3, r
    assert Path("/proc/sys/kernel/core_pattern").read_text() == host_before


def test_caller_environment_never_enters(monkeypatch):
    monkeypatch.setenv("RLOBS_SANDBOX_CANARY", "hunter2-canary")
    r = _run("import os, glob\nimport sys\n"
             "seen = b''\n"
             "for p in glob.glob('/proc/*/environ'):\n"
             "    try: seen += open(p, 'rb').read()\n"
             "    except OSError: pass\n"
             "print(sorted(os.environ))\nprint(seen.replace(b'\\0', b' ').decode())\n")
    assert r.returncode == 0, r
    assert "hunter2-canary" not in r.stdout
    names = eval(r.stdout.splitlines()[0])  # a list of str printed by the sandbox; parsed here
    assert set(names) <= {"PWD", "LC_CTYPE"}  # bwrap's working dir; Python's own C-locale coercion


def test_unprivileged_uid_in_a_user_namespace_without_capabilities():
    r = _run("import os\nst = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n"
             "print(os.getuid(), os.getgid(), os.getgroups())\n"
             "for k in ('CapInh', 'CapPrm', 'CapEff', 'CapAmb', 'NoNewPrivs', 'Seccomp'): print(k, st[k].strip())\n"
             "print('uid_map', open('/proc/self/uid_map').read().split())\n")
    lines = r.stdout.splitlines()
    assert lines[0] == "65534 65534 []", r
    caps = dict(line.split() for line in lines[1:7])
    assert {caps[k] for k in ("CapInh", "CapPrm", "CapEff", "CapAmb")} == {"0000000000000000"}
    assert caps["NoNewPrivs"] == "1" and caps["Seccomp"] == "2"  # 2 = filter mode
    assert eval(lines[7].split(" ", 1)[1])[0] == "65534"  # the host uid: test_program_runs_under_a_fresh_...


@pytest.mark.parametrize("name,args", [("keyctl", (0, -3, 0)), ("unshare", (0x10000000,)), ("mount", (0, 0, 0, 0, 0)),
                                       ("io_uring_setup", (1, 0)), ("bpf", (0, 0, 0)), ("perf_event_open", (0, 0, -1, -1, 0))])
def test_seccomp_refuses_host_wide_syscalls(name, args):
    nr = sandbox._ARCH[__import__("platform").machine()][1][name]
    r = _run("import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n"
             f"rc = libc.syscall({nr}, *{args!r})\nprint(rc, errno.errorcode.get(ctypes.get_errno()))\n")
    assert r.stdout.split() == ["-1", "EPERM"], r


def test_no_nested_user_namespace():
    r = _run("import ctypes, errno, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
             "try:\n    pid = os.fork()\nexcept OSError as e:\n    print('fork', e); raise SystemExit\n"
             "if pid == 0:\n"
             "    rc = libc.unshare(0x10000000)\n    print('unshare', rc, errno.errorcode.get(ctypes.get_errno()), flush=True)\n"
             "    os._exit(0)\nos.waitpid(pid, 0)\n")
    assert "unshare -1" in r.stdout, r


def test_fork_bomb_is_capped_by_the_process_limit(limits_mode):
    r = _run("import os, time\nn = 0\nfor _ in range(200):\n"
             "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
             "    if pid == 0:\n        time.sleep(5); os._exit(0)\n    n += 1\nprint(n, flush=True)\nos._exit(0)\n",
             nproc=16, timeout_s=10)
    assert r.stdout.strip().isdigit(), r
    assert int(r.stdout) <= 15  # nproc counts the program itself


@pytest.fixture(params=["host", "rss-watch"])
def limits_mode(request, monkeypatch):
    """Whatever this host gives (a cgroup when writable), and the fallback CI gets without one."""
    if request.param == "rss-watch":
        monkeypatch.setattr(sandbox._Limits, "_setup", lambda *a: (_ for _ in ()).throw(OSError("forced")))
    return request.param


def test_memory_limit_covers_the_whole_sandbox(limits_mode):
    # four children of 400 MB each (touched) under a 512 MB limit: at most one can hold its block at a time
    r = _run("import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n"
             "        b = b'x' * (400 << 20)\n        time.sleep(2)\n        print('held', flush=True)\n        os._exit(0)\n"
             "for _ in range(4):\n    os.wait()\n", mem_mb=512, timeout_s=20)
    assert r.stdout.count("held") <= 1, r
    assert r.memory_exceeded, r
    assert limits_mode == "host" or r.limits == "rss-watch"


def test_huge_output_is_cut_and_the_program_killed():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = _run("import sys\nblock = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(block)\n", timeout_s=30)
    grew_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert r.output_overflow and len(r.stdout) <= sandbox.MAX_OUTPUT and not r.timed_out, r.seconds
    assert grew_kb < 64 << 10  # this process did not take the gigabyte


def _s(completion, answer):
    return {"sample_id": "x", "completion": completion, "answer": answer, "finish_reason": "stop", "prompt": "?"}


@pytest.mark.parametrize("hack", [
    "print('PASS')",
    "__import__('sys').exit(print('PASS'))",
    "(print('PASS'), __import__('os')._exit(0))",
    "__import__('os').write(int(__import__('sys').argv[1]), b'PASS')",
    "True",
    "987654320.99",
])
def test_code_grader_reward_hack_earns_nothing(hack):
    sample = _s(f"#{hack}", 987654321)
    assert "987654321" not in code_program(sample)  # the expected answer stays on this side
    assert grade_code(sample) == 0.0


def test_code_grader_still_pays_the_right_answer():
    assert grade_code(_s("#987654321", 987654321)) == 1.0
    assert grade_code(_s("#(10**9 - 12345679)", 987654321)) == 1.0


def test_nothing_of_the_call_survives_it():
    r = _run("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint(os.getpid())\n")
    assert r.returncode == 0
    time.sleep(0.2)
    assert [p for p, uid, state in _procs() if uid >= sandbox._UID_BASE and state not in "ZX"] == []  # zombies are dead


def test_program_runs_under_a_fresh_unprivileged_host_uid():
    # seen from the host (as root in CI): the program's real uid is the call's own, never 0
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(_run, "import time\ntime.sleep(3)\n", timeout_s=10)
        seen: set[int] = set()
        deadline = time.monotonic() + 8
        while not seen and time.monotonic() < deadline:
            seen = {uid for p, uid in _program_uids()}
            time.sleep(0.05)
        fut.result()
    assert seen and min(seen) >= sandbox._UID_BASE


def _status(pid: str) -> tuple[int, str] | None:
    """(real uid, state letter) of a process, None when it is gone or unreadable."""
    try:
        st = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
        return int(st["Uid"].split()[0]), st["State"].split()[0]
    except (OSError, KeyError, ValueError, IndexError):
        return None


def _procs() -> list[tuple[str, int, str]]:
    return [(pid, *st) for pid in os.listdir("/proc") if pid.isdigit() and (st := _status(pid)) is not None]


def _program_uids() -> list[tuple[str, int]]:
    """(pid, host uid) of the sandboxed interpreter: the uid is read between two reads of the command line that
    both name the program, so a pid that was another (root) process when its status was read is not counted."""
    def program(pid: str) -> bool:
        cmd = _cmdline(pid)
        return b"/sandbox/main.py" in cmd and b"bwrap" not in cmd

    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and program(pid) and (st := _status(pid)) is not None and program(pid):
            out.append((pid, st[0]))
    return out


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_sandbox_that_cannot_start_is_an_error_not_a_zero_reward(monkeypatch):
    monkeypatch.setattr(sandbox, "_ro_paths", lambda: ["/usr", "/nonexistent-rlobs-path"])
    r = _run("print(1)")
    assert not r.started and "bwrap" in r.stderr
    with pytest.raises(RuntimeError, match="sandbox did not start"):
        grade_code(_s("#987654321", 987654321))
    monkeypatch.undo()
    assert _run("print(1)").started
