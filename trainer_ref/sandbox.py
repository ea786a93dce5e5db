"""Run untrusted (model-written) Python in a bubblewrap sandbox.

``bwrap`` with every namespace unshared (no network: only a loopback-less net namespace), a
read-only bind of the minimal system paths Python needs (/usr, /lib*, /bin, and the interpreter's
prefix), a private writable tmpfs work directory holding only the program, no /home, /root, /etc
secrets or /work; CPU seconds, address space, file size and process count limited with
``prlimit``; a wall-clock timeout that kills the whole process group.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SandboxResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool


def available() -> bool:
    return shutil.which("bwrap") is not None and shutil.which("prlimit") is not None


def _ro_paths() -> list[str]:
    base = ["/usr", "/lib", "/lib64", "/bin", "/sbin"]
    prefix = os.path.realpath(sys.base_prefix)
    return [p for p in dict.fromkeys(base + [prefix]) if os.path.exists(p)]


def run_python(code: str, *, timeout_s: float = 5.0, cpu_s: int = 5, mem_mb: int = 512, nproc: int = 16,
               python: str | None = None) -> SandboxResult:
    """Execute ``code`` with the sandboxed interpreter; never raises for the program's own failures."""
    py = os.path.realpath(python or sys.executable)
    with tempfile.TemporaryDirectory(prefix="rlobs-sbx-") as work:
        Path(work, "main.py").write_text(code)
        cmd = ["prlimit", f"--cpu={cpu_s}", f"--as={mem_mb << 20}", f"--fsize={1 << 20}", f"--nproc={nproc}", "--",
               "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
               "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
               "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        for p in _ro_paths():
            cmd += ["--ro-bind", p, p]
        cmd += ["--ro-bind", work, "/sandbox", "--chdir", "/sandbox", py, "-I", "-S", "/sandbox/main.py"]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            timed_out = True
        return SandboxResult(proc.returncode, out.decode(errors="replace")[:10000], err.decode(errors="replace")[:10000],
                             time.perf_counter() - t0, timed_out)
