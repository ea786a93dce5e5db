"""Prometheus service-discovery target files: one per live process, gone when the process is.

A process serving ``/metrics`` writes ``<run>/prometheus_sd/<process>.json`` with its address and the
target labels ``run``, ``component`` and ``rank`` (so Prometheus' own ``up`` series says which process a
target is; scrape with ``honor_labels: true``, the exposed series carry the same run and component).
Never a pid or process name as a label: a restarted process keeps its series. The pid and host ride in
``__meta_rlobs_*`` labels, which Prometheus drops after relabelling; the reaper reads them.

The lifecycle, as Prometheus sees it:

- running: the file exists and the target is up; a keep-alive thread touches the file every
  ``KEEPALIVE_S`` so its mtime says when the process was last alive;
- ended cleanly: the process removes its file at close, the target and its series go (stale), and
  every alert gated on ``up`` stops at once: a finished run pages nobody;
- died (SIGKILL, OOM, a node gone): the file stays, the target is down (``up == 0``) and the
  process-down alert names it; once the file has not been touched for ``GRACE_S`` and its pid is gone on
  this host, any rlobs process of the run (or ``rlobs observe``) removes it, so a dead target does not
  page forever. A stopped process (SIGSTOP) keeps its pid: it stays a down target until it resumes.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from pathlib import Path

from rlobs.events import WriterInfo
from rlobs.store.manifest import PROMETHEUS_SD_DIR, write_json_atomic

log = logging.getLogger("rlobs.targets")

KEEPALIVE_S = 10.0
GRACE_S = 120.0  # a dead process's target stays (down, alerting) this long after it last touched its file


def target_labels(info: WriterInfo) -> dict[str, str]:
    return {"run": info.run_id, "component": info.component, "rank": str(info.rank),
            "__meta_rlobs_host": socket.gethostname(), "__meta_rlobs_pid": str(os.getpid())}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # someone else's process, or not a pid we can judge: leave it
    return True


def reap_dead(sd_dir: Path, grace_s: float = GRACE_S, *, now: float | None = None) -> list[Path]:
    """Remove target files of processes on this host whose pid is gone and whose file is older than
    ``grace_s``; returns what was removed. Files of other hosts and unreadable files are left alone."""
    now = time.time() if now is None else now
    host = socket.gethostname()
    removed = []
    try:
        files = list(Path(sd_dir).glob("*.json"))
    except OSError:
        return removed
    for path in files:
        try:
            if not path.is_file() or path.is_symlink() or now - path.stat().st_mtime < grace_s:
                continue
            labels = json.loads(path.read_text())[0]["labels"]
            if labels.get("__meta_rlobs_host") != host or _pid_alive(int(labels["__meta_rlobs_pid"])):
                continue
            path.unlink()
            removed.append(path)
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            continue
    return removed


class TargetFile:
    """The target file of one process: written at start, touched while alive, removed at a clean close."""

    def __init__(self, run_dir: Path, info: WriterInfo, target: str):
        self.dir = Path(run_dir) / PROMETHEUS_SD_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / f"{info.process}.json"
        write_json_atomic(self.path, [{"targets": [target], "labels": target_labels(info)}])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keepalive, name="rlobs-sd-keepalive", daemon=True)
        self._thread.start()

    def _keepalive(self) -> None:
        while not self._stop.wait(KEEPALIVE_S):
            try:
                os.utime(self.path)
                reap_dead(self.dir)
            except OSError as exc:  # the run dir went away or is read-only: telemetry never breaks training
                log.debug("rlobs: target file keep-alive failed: %s", exc)

    def close(self) -> None:
        self._stop.set()
        self.path.unlink(missing_ok=True)
        reap_dead(self.dir)
