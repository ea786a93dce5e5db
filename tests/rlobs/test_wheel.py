"""The built wheel works where the source tree is not: a fresh venv gets rlobs from the wheel alone, its
doctor links runbook pages that exist there, and the replay app's runbook page renders from them.

The venv sees the system's site-packages for the dependencies (pyarrow, duckdb, streamlit: no network
needed), but rlobs itself comes from the wheel: the test checks that it imports from the venv and that
the runbooks and dashboards there are regular files (in the source tree they are links).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _source_copy(dst: Path) -> Path:
    """The checkout's tracked and unignored files (symlinks kept), so the build leaves the checkout clean."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    archive = dst.with_suffix(".tar")
    with tarfile.open(archive, "w") as tar:
        for name in filter(None, names):
            if (REPO / name).exists() or (REPO / name).is_symlink():
                tar.add(REPO / name, arcname=name, recursive=False)
    with tarfile.open(archive) as tar:
        tar.extractall(dst, filter="tar")
    return dst


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    if subprocess.run(["git", "-C", str(REPO), "rev-parse"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    base = tmp_path_factory.mktemp("wheel")
    src = _source_copy(base / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", ".", "--no-deps", "--no-build-isolation",
                    "-w", str(base / "dist")], cwd=src, check=True, timeout=600)
    (wheel,) = (base / "dist").glob("rlobs-*.whl")
    env_dir = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(env_dir)], check=True, timeout=300)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--force-reinstall",
                    str(wheel)], check=True, timeout=300, cwd=base)
    return py, base


def _run(py: Path, code: str, cwd: Path) -> str:
    out = subprocess.run([str(py), "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                         cwd=cwd)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_the_wheel_ships_runbooks_and_dashboards_as_regular_files(venv):
    py, base = venv
    found = json.loads(_run(py, """
        import json, rlobs
        from rlobs.runbooks import data_dir
        rb, db = data_dir("runbooks"), data_dir("dashboards")
        print(json.dumps({"module": rlobs.__file__, "runbooks": str(rb), "dashboards": str(db),
                          "links": [str(p) for p in (rb, db) if p.is_symlink()],
                          "pages": sorted(p.name for p in rb.glob("*.md")),
                          "boards": sorted(p.name for p in db.glob("*.json"))}))
    """, base))
    venv_dir = str(py.parent.parent)
    assert found["module"].startswith(venv_dir) and found["runbooks"].startswith(venv_dir)
    assert not found["links"]
    assert found["pages"] == sorted(p.name for p in (REPO / "runbooks").glob("*.md"))
    assert found["boards"] == sorted(p.name for p in (REPO / "dashboards").glob("*.json"))


def test_doctor_from_the_wheel_links_runbooks_that_exist(venv):
    py, base = venv
    run = base / "run"
    _run(py, f"""
        import rlobs
        rec = rlobs.init({str(run)!r}, component="trainer", prometheus=False)
        for step in range(4):
            rec.set_step(step)
            rec.emit("train_step", step=step, grad_norm=float("nan") if step == 3 else 1.0, nonfinite=step == 3)
        rlobs.shutdown()
    """, base)
    out = subprocess.run([str(py.parent / "rlobs"), "doctor", str(run), "--json"], capture_output=True, text=True,
                         timeout=300, cwd=base)
    assert out.returncode == 2, out.stderr[-2000:]  # critical: the NaN grad norm
    findings = json.loads(out.stdout)["findings"]
    assert findings and findings[0]["rule"] == "grad-norm-nonfinite"
    for f in findings:
        page = Path(f["runbook"])
        assert page.is_file() and str(page).startswith(str(py.parent.parent)), f["runbook"]
    version = subprocess.run([str(py.parent / "rlobs"), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("rlobs ")


def test_the_apps_runbook_page_renders_from_the_wheel(venv):
    py, base = venv
    pytest.importorskip("streamlit")
    run = base / "runs" / "r1"
    shown = json.loads(_run(py, f"""
        import json, os, rlobs
        from rlobs.app import MAIN_SCRIPT, paths
        from streamlit.testing.v1 import AppTest

        rec = rlobs.init({str(run)!r}, component="trainer", prometheus=False)
        rec.emit("train_step", step=0, grad_norm=1.0)
        rlobs.shutdown()
        os.environ[paths.ENV_ROOT], os.environ[paths.ENV_RUNS] = {str(run.parent)!r}, "r1"
        at = AppTest.from_file(str(MAIN_SCRIPT), default_timeout=60)
        at.query_params["rule"] = "grader-hung"
        at.switch_page("views/runbook.py").run()
        print(json.dumps({{"main": str(MAIN_SCRIPT), "error": [e.value for e in at.exception],
                          "markdown": [m.value for m in at.markdown], "warning": [w.value for w in at.warning]}}))
    """, base))
    assert shown["main"].startswith(str(py.parent.parent))  # the installed app, not the checkout's
    assert not shown["error"] and not shown["warning"], shown
    page = (REPO / "runbooks" / "grader-hung.md").read_text().splitlines()[0]
    assert any(m.startswith(page) for m in shown["markdown"]), shown["markdown"][:3]
