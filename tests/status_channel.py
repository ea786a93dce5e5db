"""A side channel from a test's child process to the test: JSON lines on a dedicated pipe, never stdout.

What a child prints on stdout is not a protocol: a model build, Ray, vLLM or a warning can print there
first (a fresh machine builds the tiny model on first use and printed an empty line before the driver's
"ready"). The test creates a ``StatusPipe``, starts the child with ``**pipe.popen_kwargs()`` and reads
messages with ``pipe.read(timeout)``; the child calls ``report({...})``, which writes one JSON line to
the file descriptor named by ``RLOBS_TEST_STATUS_FD``.
"""

from __future__ import annotations

import json
import os
import select
import time
from typing import Any

ENV = "RLOBS_TEST_STATUS_FD"


def report(message: dict[str, Any]) -> None:
    """Child side: send one message (a no-op when the process was not started with a status pipe)."""
    fd = os.environ.get(ENV)
    if fd:
        os.write(int(fd), (json.dumps(message) + "\n").encode())


class StatusPipe:
    """Parent side: one pipe per child; ``read`` returns the next message, or None when the child exited."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        self._buf = b""

    def popen_kwargs(self, env: dict[str, str] | None = None) -> dict[str, Any]:
        return {"pass_fds": (self._w,), "env": {**(os.environ if env is None else env), ENV: str(self._w)}}

    def started(self) -> None:
        """Call right after Popen: the parent's write end must close for EOF to reach ``read``."""
        if self._w >= 0:
            os.close(self._w)
            self._w = -1

    def read(self, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no status message from the child within {timeout:.0f} s")
            ready, _, _ = select.select([self._r], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._r, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        self.started()
        os.close(self._r)
