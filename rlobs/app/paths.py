"""Which runs the app may open: every path is resolved and must lie under the runs root.

``rlobs replay`` passes the root and the runs through environment variables (``RLOBS_APP_ROOT``,
``RLOBS_APP_RUNS``, ``os.pathsep``-separated); the app confines them again (and any run named in a
URL), so neither a symlink nor ``..`` nor an absolute path can point it outside the root.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_ROOT = "RLOBS_APP_ROOT"
ENV_RUNS = "RLOBS_APP_RUNS"
MANIFEST = "manifest.json"


class PathOutsideRoot(ValueError):
    """A run path that resolves outside the runs root (or is not a run directory)."""


def confine(root: str | os.PathLike[str], candidate: str | os.PathLike[str]) -> Path:
    """Resolve ``candidate`` (relative to ``root`` unless absolute) and check it is a run under ``root``.

    Any path that cannot be resolved (a NUL byte, a symlink loop, a name too long, …) is a PathOutsideRoot
    too, so callers show one message for every bad run path."""
    try:
        base = Path(root).resolve()
        raw = Path(candidate)
        path = (raw if raw.is_absolute() else base / raw).resolve()
        if path != base and not path.is_relative_to(base):
            raise PathOutsideRoot(f"{candidate!s} is outside the runs root {base}")
        if not path.is_dir():
            raise PathOutsideRoot(f"{candidate!s} is not a directory under {base}")
    except PathOutsideRoot:
        raise
    except (OSError, ValueError, RuntimeError) as exc:  # RuntimeError: a symlink loop on older Pythons
        raise PathOutsideRoot(f"{candidate!r} is not a usable run path: {exc}") from None
    return path


def relative_name(root: str | os.PathLike[str], path: Path) -> str:
    base = Path(root).resolve()
    try:
        rel = path.resolve().relative_to(base)
    except (OSError, ValueError, RuntimeError):
        raise PathOutsideRoot(f"{path} is outside the runs root {base}") from None
    return str(rel) if str(rel) != "." else path.name


def list_runs(root: str | os.PathLike[str], depth: int = 2, limit: int = 500) -> list[str]:
    """Run directories (holding a manifest) under ``root``, up to ``depth`` levels down, as relative names.
    A symlink that leads outside the root (or nowhere) is not listed."""
    base = Path(root).resolve()
    found: list[str] = []
    level = [base]
    for _ in range(depth + 1):
        nxt: list[Path] = []
        for d in level:
            try:
                if (d / MANIFEST).is_file():
                    found.append(relative_name(base, d) if d != base else ".")
                    continue
                for p in sorted(d.iterdir()):
                    if p.name.startswith(".") or not p.is_dir():
                        continue
                    real = p.resolve()
                    if real == base or not real.is_relative_to(base):
                        continue
                    nxt.append(p)
            except (OSError, ValueError, RuntimeError):  # PathOutsideRoot is a ValueError
                continue
        level = nxt
        if len(found) >= limit:
            break
    return sorted(found)[:limit]


def common_root(runs: list[Path]) -> Path:
    """The deepest folder holding every run (each run's parent for a single run)."""
    parents = [str(Path(r).resolve().parent) for r in runs]
    return Path(os.path.commonpath(parents))


def from_env(environ: dict[str, str] | None = None) -> tuple[Path, list[Path]]:
    """The runs root and the (confined) runs given by ``rlobs replay``; raises PathOutsideRoot."""
    env = os.environ if environ is None else environ
    root_raw = env.get(ENV_ROOT)
    runs_raw = [r for r in env.get(ENV_RUNS, "").split(os.pathsep) if r]
    if not root_raw:
        if not runs_raw:
            raise PathOutsideRoot(f"no run given: start the app with `rlobs replay RUN` (or set {ENV_ROOT})")
        root_raw = str(common_root([Path(r) for r in runs_raw]))
    root = Path(root_raw).resolve()
    return root, [confine(root, r) for r in runs_raw]
