"""The replay app on hostile input (issue #21): bad run paths are messages on the page, and record strings
(run ids, grader kinds, sample ids) are shown as text: no Markdown image, link or HTML from a record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.app.conftest import app_test, no_failure

pytest.importorskip("streamlit")

EVIL = "![i](http://evil.example/i.png) [x](http://evil.example) <img src=http://evil.example/j.png> **b** x [/] y"


def _tiny_run(run: Path, run_id: str | None = None, kind: str = "rule") -> Path:
    import rlobs

    rec = rlobs.init(run, component="grader", prometheus=False, set_global=False, run_id=run_id)
    for i in range(12):
        rec.set_step(i)
        rec.emit("train_step", step=i, loss=1.0)
        rec.emit("grader_call", sample_id=f"s{i}", grader_kind=kind, queue_wait_s=0.001, latency_s=5.0,
                 outcome="timeout", reward=None)
    rec.close()
    return run


@pytest.fixture(scope="module")
def hostile_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("hostile")
    root = base / "runs"
    _tiny_run(root / "ok")
    _tiny_run(root / "evil", run_id="run " + EVIL, kind=EVIL)
    _tiny_run(base / "outside")
    (root / "escape").symlink_to(base / "outside")
    (root / "loop").symlink_to(root / "loop")
    return root


def _shown(at) -> list[str]:
    out = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success", "title", "subheader"):
        out += [str(e.value) for e in getattr(at, kind)]
    return out


@pytest.mark.parametrize("raw", ["\x00", "ok\x00/../..", "escape", "loop", "../outside", "/" + "a" * 5000])
def test_every_bad_run_path_is_a_message_on_the_page(hostile_root, monkeypatch, raw):
    at = app_test(monkeypatch, hostile_root, "ok", run=raw)
    at.run()
    no_failure(at)
    assert any(e.value.startswith("ignored ?run=") for e in at.error), _shown(at)


def test_a_symlink_out_of_the_root_is_not_listed_and_not_opened(hostile_root, monkeypatch):
    at = app_test(monkeypatch, hostile_root, "ok")
    at.run()
    no_failure(at)
    options = at.sidebar.selectbox[0].options
    assert "ok" in options and "evil" in options and "escape" not in options and "loop" not in options
    at = app_test(monkeypatch, hostile_root, "escape")  # given at start, as `rlobs replay` would pass it
    at.run()
    no_failure(at)
    assert at.error and "outside the runs root" in at.error[0].value


def test_record_strings_are_text_not_markdown(hostile_root, monkeypatch):
    at = app_test(monkeypatch, hostile_root, "evil")
    at.run()
    no_failure(at)
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    shown = _shown(at)
    # the finding about the EVIL grader kind and the run id are on the page, as text
    assert any("evil.example/i.png" in md.render(s) for s in shown), shown
    for page in ("graders", "samples"):
        at.switch_page(f"views/{page}.py").run()
        no_failure(at)
        shown += _shown(at)
    for s in shown:
        html = md.render(s)
        assert "<img" not in html and 'href="http://evil' not in html, s


def test_a_fifo_in_a_run_does_not_hang_the_app(hostile_root, monkeypatch, tmp_path):
    import os
    import shutil

    root = tmp_path / "runs"
    shutil.copytree(hostile_root / "ok", root / "ok")
    os.mkfifo(root / "ok" / "processes" / "stuck.json")
    os.mkfifo(root / "ok" / "events" / "train_step" / "stuck.00000.arrows")
    (root / "ok" / "processes" / "zero.json").symlink_to("/dev/zero")
    at = app_test(monkeypatch, root, "ok")
    at.run(timeout=60)
    no_failure(at)
    assert any("could not be read in full" in w.value for w in at.warning)
    assert json.dumps([s for s in _shown(at)])  # rendered, no hang
