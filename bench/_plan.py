"""Registered plans of real trainer_ref runs, shared by the benches that record a split and score it afterwards
(bench/entropy_converged.py, bench/solved_task.py): record each planned run once, then a ``run | score`` CLI."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def record(root: Path, runs: Mapping[str, Sequence[str]], only: str = "") -> None:
    """Record every run of ``runs`` (name -> ``python -m trainer_ref.run`` arguments) not yet recorded under
    ``root``: one process each, its log beside the record, ``done.json`` (the command, the seconds) once it ends
    with 0, so a split resumes where it stopped. ``only``: comma-separated names."""
    root.mkdir(parents=True, exist_ok=True)
    for name, args in runs.items():
        rd = root / name
        if (only and name not in only.split(",")) or finished(rd):
            continue
        cmd = [sys.executable, "-m", "trainer_ref.run", *args, "--no-progress", "--run-dir", str(rd)]
        t0 = time.monotonic()
        with (root / f"{name}.log").open("w") as log:
            rc = subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        print(f"{name}: rc {rc}, {time.monotonic() - t0:.0f} s", flush=True)
        if rc == 0:
            (rd / "done.json").write_text(json.dumps({"cmd": cmd, "seconds": time.monotonic() - t0}))


def finished(rd: Path) -> bool:
    """Whether the run recorded at ``rd`` ended with 0 (``record`` wrote its ``done.json``)."""
    return (rd / "done.json").exists()


def save(out: Path, split: str, res: Mapping[str, object], lines: Sequence[str]) -> None:
    """A split's scores: ``<out>_<split>.json`` (``res``) and ``.md`` (``lines``), the table printed too."""
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}_{split}.json").write_text(json.dumps(res, indent=1))
    Path(f"{out}_{split}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def cli(splits: Sequence[str], run: Callable[[str, Path, str], None],
        score: Callable[[str, Path, Path], object], root: str, out: Path) -> None:
    """``run | score [--split S] [--root DIR] [--only NAMES] [--out PREFIX]``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=("run", "score"))
    ap.add_argument("--split", default="heldout", choices=tuple(splits))
    ap.add_argument("--root", default=root, help="where the run records go")
    ap.add_argument("--only", default="", help="comma-separated run names")
    ap.add_argument("--out", default=str(out))
    a = ap.parse_args()
    if a.cmd == "run":
        run(a.split, Path(a.root), a.only)
    else:
        score(a.split, Path(a.root), Path(a.out))
