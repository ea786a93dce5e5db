"""Security lint (runs in CI): no pickle or unsafe deserialisation anywhere in the project's code."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["rlobs", "probes", "trainer_ref", "bench", "tests"]
BANNED_MODULES = {"pickle", "cPickle", "cloudpickle", "dill", "shelve", "marshal", "joblib"}


def _py_files():
    for pkg in PACKAGES:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def _kw(call: ast.Call, name: str):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [f"imports {a.name}" for a in node.names if a.name.split(".")[0] in BANNED_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in BANNED_MODULES:
            out.append(f"imports from {node.module}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            fn, owner = node.func.attr, node.func.value
            owner_name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
            if fn == "load" and owner_name == "torch":
                wo = _kw(node, "weights_only")
                if not (isinstance(wo, ast.Constant) and wo.value is True):
                    out.append(f"line {node.lineno}: torch.load without weights_only=True")
            if fn == "load" and owner_name in ("np", "numpy"):
                ap = _kw(node, "allow_pickle")
                if isinstance(ap, ast.Constant) and ap.value is True:
                    out.append(f"line {node.lineno}: numpy load with allow_pickle=True")
            if fn in ("load", "load_all") and owner_name == "yaml":
                loader = _kw(node, "Loader")
                if loader is None or "Safe" not in ast.unparse(loader):
                    out.append(f"line {node.lineno}: yaml.{fn} without a SafeLoader (use yaml.safe_load)")
            if fn in ("read_pickle", "to_pickle"):
                out.append(f"line {node.lineno}: pandas {fn}")
    return out


def test_no_pickle_or_unsafe_load_anywhere():
    bad = []
    for f in _py_files():
        if f.name == Path(__file__).name:
            continue
        bad += [f"{f.relative_to(ROOT)}: {v}" for v in _violations(f)]
    assert not bad, "\n".join(bad)


def test_the_lint_catches_what_it_claims(tmp_path):
    sample = tmp_path / "bad.py"
    sample.write_text("import pickle\nimport torch, yaml, numpy as np\ntorch.load('x')\nyaml.load(s)\n"
                      "np.load('a', allow_pickle=True)\ntorch.load('y', weights_only=True)\n")
    found = _violations(sample)
    assert found == ["imports pickle", "line 3: torch.load without weights_only=True",
                     "line 4: yaml.load without a SafeLoader (use yaml.safe_load)",
                     "line 5: numpy load with allow_pickle=True"]
