"""Recorded scenarios for the app's tests, under one runs root: healthy, cache_not_reset, hung_grader (with
prompt/completion text and per-token log-probs), a damaged copy, and a folder with a broken manifest."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.doctor import scenarios

MAIN = Path(__file__).resolve().parents[2] / "rlobs" / "app" / "main.py"


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    scenarios.build(root / "healthy", None, seed=0, sample_detail=True)
    scenarios.build(root / "cache_not_reset", "cache_not_reset", seed=0, sample_detail=True)
    scenarios.build(root / "hung_grader", "hung_grader", seed=0, sample_detail=True)
    damaged = root / "damaged"
    shutil.copytree(root / "healthy", damaged)
    victim = min((damaged / "events" / "train_step").glob("*.parquet"))
    victim.write_bytes(victim.read_bytes()[:100])
    (root / "broken").mkdir()
    (root / "broken" / "manifest.json").write_text("{not json")
    return root


def app_test(monkeypatch: pytest.MonkeyPatch, root: Path, *runs: str, **params: str):
    """An AppTest of the replay app on ``runs`` under ``root`` (as ``rlobs replay`` would start it)."""
    import os

    from streamlit.testing.v1 import AppTest

    from rlobs.app import paths

    monkeypatch.setenv(paths.ENV_ROOT, str(root))
    monkeypatch.setenv(paths.ENV_RUNS, os.pathsep.join(runs))
    at = AppTest.from_file(str(MAIN), default_timeout=60)
    for k, v in params.items():
        at.query_params[k] = v
    return at


def unescape(markdown: str) -> str:
    """The text a reader sees for Markdown whose record-derived parts were backslash-escaped (rlobs.textsafe.md)."""
    import re

    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


def texts(at) -> list[str]:
    return [unescape(m.value) for m in at.markdown]


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def no_failure(at) -> None:
    assert not at.exception, [e.value for e in at.exception]


@pytest.fixture(autouse=True)
def _restore_main_module():
    """AppTest runs the app script as ``__main__`` and leaves it there; a later multiprocessing spawn (the
    probes' 2-rank gloo test) would then re-run the app in its children. Put the real one back."""
    import sys

    saved = sys.modules.get("__main__")
    saved_file = getattr(saved, "__file__", None)
    yield
    if sys.modules.get("__main__") is not saved:
        sys.modules["__main__"] = saved
    if saved is not None and getattr(saved, "__file__", None) != saved_file:
        if saved_file is None:
            saved.__dict__.pop("__file__", None)
        else:
            saved.__file__ = saved_file
