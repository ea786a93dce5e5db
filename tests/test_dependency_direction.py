"""Architecture: trainer_ref -> probes -> rlobs, and `import rlobs` stays light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "rlobs": {"probes", "trainer_ref"},
    "probes": {"trainer_ref"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_against_the_dependency_direction(package):
    bad = []
    for f in sorted((ROOT / package).rglob("*.py")):
        hit = _imports(f) & FORBIDDEN[package]
        if hit:
            bad.append(f"{f.relative_to(ROOT)} imports {sorted(hit)}")
    assert not bad, "\n".join(bad)


def test_rlobs_never_imports_the_app_or_dashboards_tooling_into_probes_or_trainer():
    for package in ("probes", "trainer_ref"):
        for f in sorted((ROOT / package).rglob("*.py")):
            assert not _imports(f) & {"streamlit"}, f


@pytest.mark.parametrize("module", ["rlobs", "rlobs.store", "rlobs.cli", "rlobs.catalogue", "rlobs.api"])
def test_importing_rlobs_pulls_in_no_heavy_framework(module):
    code = (f"import sys, {module}; heavy = [m for m in ('torch', 'ray', 'vllm', 'streamlit', 'transformers') "
            "if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"import {module} imported {out.stdout.strip()}"
