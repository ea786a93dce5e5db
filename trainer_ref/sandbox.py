"""Run untrusted (model-written) Python in a bubblewrap sandbox that holds when the caller is root.

Layers, outermost first (each one is shown by a test in ``tests/trainer_ref/test_sandbox_escape.py``):

* **cgroup** (v2, or v1 ``memory`` + ``pids``) when this host lets us create one: a memory limit for the
  whole sandbox (every process together, swap included where the kernel has it) and a process-count
  limit, both binding on root. Without a writable cgroup the host watches the summed RSS of the
  sandbox's unique uid every 20 ms and kills it past the limit (``SandboxResult.limits`` names which).
* **rlimits** (``prlimit``): CPU seconds, address space per process, file size, and a process count
  that binds because the program does not run as root (below).
* An outer ``bwrap`` (run by the caller, e.g. root) only builds a mount namespace in which the Python
  install is reachable at a neutral path, then ``setpriv`` switches to a **fresh unprivileged uid**
  (unique per call), clears supplementary groups, the capability bounding set and inheritable
  capabilities, and sets no_new_privs.
* The inner ``bwrap``, started by that unprivileged uid: a new **user namespace** (uid/gid 65534
  inside; further user namespaces disabled), pid, net (no interfaces but a down loopback), ipc, uts and
  cgroup namespaces; **no capabilities**; a **seccomp** filter (below); a fresh ``/proc`` whose
  ``/proc/sys`` is read-only; read-only ``/usr``, ``/lib*``, ``/bin`` and the interpreter's prefix; the
  program read-only in ``/sandbox``; a private ``/tmp``; nothing else of the host (no /etc, /home,
  /root, /work). The caller's environment never enters: both bwraps start with an empty environment.
* **seccomp** (a classic BPF program generated here, loaded by ``bwrap --seccomp``): other
  architectures are killed; mount/namespace/module/kexec/bpf/perf/ptrace/keyring/io_uring/clock and
  similar host-wide syscalls fail with EPERM (clone3 with ENOSYS so libc falls back to clone).
* The host reads stdout and stderr up to ``max_output`` bytes each and kills the sandbox on overflow;
  a wall-clock timeout kills it too. Whatever happens, every process of the call's uid is killed at
  the end, and its cgroup removed.

The program's result travels on its own pipe: the sandbox passes the write end's number as
``sys.argv[1]`` (the program runs as ``__main__`` from ``/sandbox/main.py``); ``SandboxResult.result`` holds what was written there (up to 4 KiB). Callers that
judge a program (the code grader) keep the expected answer on this side and compare here.
"""

from __future__ import annotations

import os
import platform
import secrets
import select
import shutil
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MAX_OUTPUT = 64 << 10
MAX_RESULT = 4 << 10
_UID_BASE = 0x50000000  # unique uid per call: _UID_BASE + 24 random bits, far above any real account


@dataclass(frozen=True)
class SandboxResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool
    result: str | None = None  # what the program wrote on its result fd (sys.argv[1])
    output_overflow: bool = False  # stdout or stderr passed max_output: the sandbox was killed
    memory_exceeded: bool = False  # the sandbox as a whole passed mem_mb (cgroup OOM or RSS watch)
    limits: str = ""  # how the whole-sandbox limits were enforced: "cgroup-v2", "cgroup-v1" or "rss-watch"
    started: bool = True  # the inner bwrap reported the program's start (False: the sandbox itself failed)


def _tools() -> dict[str, str | None]:
    return {t: shutil.which(t) for t in ("bwrap", "prlimit", "setpriv")}


def available() -> bool:
    return all(_tools().values()) and platform.machine() in _ARCH


# --- seccomp -------------------------------------------------------------------------------------------

_ARCH = {  # machine -> (AUDIT_ARCH_*, {syscall: nr})
    "x86_64": (0xC000003E, {
        "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
        "finit_module": 313, "delete_module": 176, "bpf": 321, "perf_event_open": 298, "keyctl": 250,
        "add_key": 248, "request_key": 249, "unshare": 272, "setns": 308, "userfaultfd": 323, "swapon": 167,
        "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171, "syslog": 103, "acct": 163,
        "quotactl": 179, "open_by_handle_at": 304, "name_to_handle_at": 303, "iopl": 172, "ioperm": 173,
        "mount_setattr": 442, "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "settimeofday": 164, "clock_settime": 227, "adjtimex": 159, "clock_adjtime": 305, "vhangup": 153,
        "lookup_dcookie": 212, "uselib": 134, "fanotify_init": 300, "pidfd_getfd": 438, "kcmp": 312,
        "clone3": 435}),
    "aarch64": (0xC00000B7, {
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "ptrace": 117, "process_vm_readv": 270,
        "process_vm_writev": 271, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
        "finit_module": 273, "delete_module": 106, "bpf": 280, "perf_event_open": 241, "keyctl": 219,
        "add_key": 217, "request_key": 218, "unshare": 97, "setns": 268, "userfaultfd": 282, "swapon": 224,
        "swapoff": 225, "reboot": 142, "sethostname": 161, "setdomainname": 162, "syslog": 116, "acct": 89,
        "quotactl": 60, "open_by_handle_at": 265, "name_to_handle_at": 264, "mount_setattr": 442,
        "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "settimeofday": 170,
        "clock_settime": 112, "adjtimex": 171, "clock_adjtime": 266, "vhangup": 58, "lookup_dcookie": 18,
        "fanotify_init": 262, "pidfd_getfd": 438, "kcmp": 272, "clone3": 435}),
}
DENIED_SYSCALLS = tuple(sorted(_ARCH["x86_64"][1]))


def seccomp_bpf(machine: str | None = None) -> bytes:
    """A classic-BPF seccomp program (``struct sock_filter[]``) for ``bwrap --seccomp``."""
    audit_arch, table = _ARCH[machine or platform.machine()]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    kill, allow = 0x80000000, 0x7FFF0000
    eperm, enosys = 0x00050000 | 1, 0x00050000 | 38

    def ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("<HBBI", code, jt, jf, k)

    denied = [(nr, enosys if name == "clone3" else eperm) for name, nr in sorted(table.items())]
    # layout: [ld arch][jeq arch][ld nr][jge x32?] [jeq nr_i -> its ret]... [ret allow][ret eperm][ret enosys][ret kill]
    n = len(denied)
    out = [ins(ld, 4), None, ins(ld, 0)]
    x32 = machine in (None, "x86_64") and audit_arch == 0xC000003E
    if x32:
        out.append(None)
    checks_start = len(out)
    tail = checks_start + n  # index of "ret allow"
    idx = {"allow": tail, eperm: tail + 1, enosys: tail + 2, "kill": tail + 3}
    out[1] = ins(jeq, audit_arch, 0, idx["kill"] - 2)
    if x32:
        out[3] = ins(jge, 0x40000000, idx[eperm] - 4, 0)
    for i, (nr, action) in enumerate(denied):
        pos = checks_start + i
        out.append(ins(jeq, nr, idx[action] - pos - 1, 0))
    out += [ins(ret, allow), ins(ret, eperm), ins(ret, enosys), ins(ret, kill)]
    return b"".join(out)  # type: ignore[arg-type]


# --- whole-sandbox limits ------------------------------------------------------------------------------

class _Limits:
    """A cgroup (v2 or v1 memory+pids) for one call, or the RSS watch fallback."""

    def __init__(self, name: str, mem_bytes: int, pids: int) -> None:
        self.mem_bytes, self.dirs, self.kind = mem_bytes, [], "rss-watch"
        try:
            self._setup(name, mem_bytes, pids)
        except OSError:
            self.close()
            self.dirs, self.kind = [], "rss-watch"

    @staticmethod
    def _own(controller: str) -> str:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            if controller in ctrls.split(","):
                return path
        return "/"

    def _setup(self, name: str, mem: int, pids: int) -> None:
        root = Path("/sys/fs/cgroup")
        if (root / "cgroup.controllers").exists():  # pure v2
            parent = root / self._own("").lstrip("/")
            if not {"memory", "pids"} <= set((parent / "cgroup.subtree_control").read_text().split()):
                raise OSError("memory/pids not delegated")
            d = parent / name
            d.mkdir()
            self.dirs = [d]
            (d / "memory.max").write_text(str(mem))
            if (d / "memory.swap.max").exists():
                (d / "memory.swap.max").write_text("0")
            (d / "pids.max").write_text(str(pids))
            self.kind = "cgroup-v2"
            return
        mroot, proot = root / "memory", root / "pids"
        if not (mroot / "cgroup.procs").exists() or not (proot / "cgroup.procs").exists():
            raise OSError("no cgroup v1 memory/pids")
        md = mroot / self._own("memory").lstrip("/") / name
        pd = proot / self._own("pids").lstrip("/") / name
        md.mkdir()
        self.dirs = [md]
        pd.mkdir()
        self.dirs.append(pd)
        (md / "memory.limit_in_bytes").write_text(str(mem))
        try:
            (md / "memory.memsw.limit_in_bytes").write_text(str(mem))
        except OSError:
            pass  # no swap accounting: swap is then outside the limit (and absent on these hosts)
        (pd / "pids.max").write_text(str(pids))
        self.kind = "cgroup-v1"

    def join_script(self) -> str:
        return "".join(f"echo $$ > {d / 'cgroup.procs'} && " for d in self.dirs)

    def oom(self) -> bool:
        if not self.dirs:
            return False
        d = self.dirs[0]
        try:
            f = d / ("memory.events" if self.kind == "cgroup-v2" else "memory.oom_control")
            for line in f.read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == "oom_kill" and int(v) > 0:
                    return True
            if self.kind == "cgroup-v1":
                return int((d / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError):
            pass
        return False

    def close(self) -> None:
        for d in reversed(self.dirs):
            for _ in range(200):
                try:
                    for pid in (d / "cgroup.procs").read_text().split():
                        _kill(int(pid))
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _uid_procs(uid: int) -> list[tuple[int, int]]:
    """(pid, rss bytes) of every process whose real uid is ``uid``."""
    out = []
    for ent in os.scandir("/proc"):
        if not ent.name.isdigit():
            continue
        try:
            uid_line, rss = None, 0
            with open(f"/proc/{ent.name}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        uid_line = line
                    elif line.startswith(b"VmRSS:"):
                        rss = int(line.split()[1]) << 10
            if uid_line is not None and int(uid_line.split()[1]) == uid:
                out.append((int(ent.name), rss))
        except (OSError, ValueError, IndexError):
            continue
    return out


# --- running -------------------------------------------------------------------------------------------

def _ro_paths() -> list[str]:
    base = ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"]
    return [p for p in base if os.path.exists(p)]


# runs the program as __main__ from /sandbox/main.py (its tracebacks name that file) after telling the host the
# sandbox came up: a setup failure (bwrap's own error) is then told apart from the program's failure
_BOOT = ("import os as _o; _o.write({status}, b'started'); _o.close({status}); del _o; "
         "exec(compile(open('/sandbox/main.py').read(), '/sandbox/main.py', 'exec'), "
         "{{'__name__': '__main__', '__file__': '/sandbox/main.py', '__builtins__': __builtins__}})")


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)  # close-on-exec off: bwrap reads it
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _argv(tools: dict[str, str], py: str, prefix: str, stage: str, uid: int, cpu_s: int, mem: int, nproc: int,
          limits: "_Limits", prog_fd: int, bpf_fd: int, res_w: int, st_w: int) -> list[str]:
    """The sandbox's command line: prlimit + an outer bwrap as the unprivileged uid, then the inner bwrap
    (every namespace, read-only root, seccomp) running the interpreter on the program."""
    outer = [tools["prlimit"], f"--cpu={cpu_s}", f"--as={mem}", f"--fsize={1 << 20}", f"--nproc={nproc + 2}",
             "--core=0", "--",
             tools["bwrap"], "--bind", "/", "/", "--tmpfs", "/tmp", "--ro-bind", prefix, stage, "--die-with-parent",
             tools["setpriv"], f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
             "--bounding-set=-all", "--no-new-privs", "--"]
    inner = [tools["bwrap"], "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
             "--disable-userns", "--assert-userns-disabled", "--cap-drop", "ALL", "--die-with-parent",
             "--new-session", "--clearenv", "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys",
             "--dev", "/dev", "--tmpfs", "/tmp"]
    for p in _ro_paths():
        inner += ["--ro-bind", p, p]
    if not any(prefix == p or prefix.startswith(p + "/") for p in _ro_paths()):
        inner += ["--ro-bind", stage, prefix]
    inner += ["--dir", "/sandbox", "--ro-bind-data", str(prog_fd), "/sandbox/main.py", "--remount-ro", "/", "--chdir", "/sandbox",
              "--seccomp", str(bpf_fd), py, "-I", "-S", "-B", "-c", _BOOT.format(status=st_w), str(res_w)]
    return ["/bin/sh", "-c", limits.join_script() + 'exec "$@"', "sh", *outer, *inner]


def _pump(fds: dict[int, str], bufs: dict[str, bytearray], caps: dict[str, int], timeout_s: float, t0: float,
          watch: bool, uid: int, mem: int) -> tuple[bool, bool, bool]:
    """Read the sandbox's pipes into ``bufs`` until they all close, the timeout, an output over its cap, or
    (``watch``: no cgroup) its processes' RSS over ``mem``; returns (timed_out, overflow, watched_oom)."""
    next_watch = 0.0
    while fds:
        left = timeout_s - (time.perf_counter() - t0)
        if left <= 0:
            return True, False, False
        ready, _, _ = select.select(list(fds), [], [], min(left, 0.02))
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                del fds[fd]
                continue
            key = fds[fd]
            room = caps[key] - len(bufs[key])
            bufs[key] += chunk[:max(room, 0)]
            if len(chunk) > room and key != "status":
                return False, True, False
        if watch and time.perf_counter() >= next_watch:
            next_watch = time.perf_counter() + 0.02
            if sum(rss for _, rss in _uid_procs(uid)) > mem:
                return False, False, True
    return False, False, False


def run_python(code: str, *, timeout_s: float = 5.0, cpu_s: int = 5, mem_mb: int = 512, nproc: int = 16,
               max_output: int = MAX_OUTPUT, python: str | None = None) -> SandboxResult:
    """Execute ``code`` in the sandbox; never raises for the program's own failures.

    ``mem_mb`` caps the whole sandbox (all its processes together) and each process's address space;
    ``nproc`` caps its processes (the interpreter and the sandbox's own two bwrap processes included).
    """
    tools = _tools()
    if not available():
        raise RuntimeError(f"sandbox unavailable: needs bwrap, prlimit and setpriv on x86_64/aarch64 ({tools})")
    py = os.path.realpath(python or sys.executable)
    prefix = os.path.realpath(sys.base_prefix if python is None else Path(py).parent.parent)
    uid = _UID_BASE + secrets.randbelow(1 << 24)
    mem = mem_mb << 20
    limits = _Limits(f"rlobs-sbx-{uid}", mem, nproc + 4)
    stage = "/tmp/rlobs-py"  # where the outer namespace shows the interpreter's prefix to the unprivileged uid
    prog_fd = _memfd("rlobs-sbx-program", code.encode())
    bpf_fd = _memfd("rlobs-sbx-seccomp", seccomp_bpf())
    res_r, res_w = os.pipe()
    os.set_inheritable(res_w, True)
    st_r, st_w = os.pipe()  # the interpreter writes "started" here once the sandbox is set up
    os.set_inheritable(st_w, True)
    argv = _argv(tools, py, prefix, stage, uid, cpu_s, mem, nproc, limits, prog_fd, bpf_fd, res_w, st_w)
    t0 = time.perf_counter()
    bufs = {"out": bytearray(), "err": bytearray(), "res": bytearray(), "status": bytearray()}
    caps = {"out": max_output, "err": max_output, "res": MAX_RESULT, "status": MAX_RESULT}
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={}, start_new_session=True, pass_fds=(prog_fd, bpf_fd, res_w, st_w))
    except BaseException:
        limits.close()
        for fd in (prog_fd, bpf_fd, res_r, res_w, st_r, st_w):
            os.close(fd)
        raise
    os.close(res_w)
    os.close(st_w)
    fds = {proc.stdout.fileno(): "out", proc.stderr.fileno(): "err", res_r: "res",  # type: ignore[union-attr]
           st_r: "status"}
    timed_out = overflow = watched_oom = False
    try:
        timed_out, overflow, watched_oom = _pump(fds, bufs, caps, timeout_s, t0, limits.kind == "rss-watch", uid,
                                                 mem)
        if not (timed_out or overflow or watched_oom):
            try:  # every pipe closed: the program ended; collect its status within what is left of the timeout
                proc.wait(timeout=max(0.05, timeout_s - (time.perf_counter() - t0)))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        watch = limits.kind == "rss-watch"  # with a cgroup, its member list is the exact set to kill
        for pid, _ in _uid_procs(uid) if watch else ():
            _kill(pid)
        proc.wait()
        memory_exceeded = watched_oom or limits.oom()
        limits.close()
        for pid, _ in _uid_procs(uid) if watch else ():  # anything that left the process group
            _kill(pid)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
        for fd in (prog_fd, bpf_fd, res_r, st_r):
            os.close(fd)
    return SandboxResult(proc.returncode, bufs["out"].decode(errors="replace"), bufs["err"].decode(errors="replace"),
                         time.perf_counter() - t0, timed_out, bufs["res"].decode(errors="replace"), overflow,
                         memory_exceeded, limits.kind, started=bufs["status"].startswith(b"started"))
