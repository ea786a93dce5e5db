"""Fixtures shared by the dashboards tests: the generated boards and the repository's dashboards/."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "dashboards"
RUNBOOKS = REPO / "runbooks"


def need(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.fail(f"{binary} is required for the dashboards tests (apt-get install prometheus)")
    return path


def interrupt_and_read(proc: subprocess.Popen, timeout: float = 30.0) -> str:
    """Ctrl-C a process whose text stdout the test has been reading line by line, and return the rest of its output.
    Not ``proc.communicate(timeout=...)``: that reads the pipe's file descriptor directly, past the lines the test's
    ``readline()`` already pulled into the stream's buffer, so those lines would be lost whenever the process wrote
    them in the same chunk as the line the test waited for (a race CI lost once)."""
    proc.send_signal(signal.SIGINT)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        rest = proc.stdout.read()  # to EOF, the stream's buffer first
    finally:
        timer.cancel()
    proc.wait(timeout=timeout)
    return rest


@pytest.fixture(scope="session")
def board_json() -> dict[str, dict]:
    """The committed Grafana JSON, by file name."""
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}
