"""Fixtures shared by the dashboards tests: the generated boards and the repository's dashboards/."""

from __future__ import annotations

import json
import shutil
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


@pytest.fixture(scope="session")
def board_json() -> dict[str, dict]:
    """The committed Grafana JSON, by file name."""
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}
