"""Every rule of the doctor on finished records, under this checkout's rules and, with ``--before``, another
checkout's (a ``git worktree add DIR COMMIT``), side by side: what a rule change moved on fresh runs.

    python bench/whole_doctor.py --runs DIR --only NAME,NAME,... [--before WORKTREE] --out bench/results/NAME

Writes ``NAME.json``: per run, the warning and critical findings (rule, severity, first step) under each rule set,
and every finding of ``--rule`` (default entropy-collapse) at any severity, info included. Each record is read by
``python -m rlobs.cli doctor --json`` in a fresh process, the other checkout's ``rlobs`` first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def findings(run: Path, pythonpath: str | None) -> list[dict]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    # `python -m` puts its working directory first on sys.path: run the other checkout's doctor from "/", so a
    # checkout it is launched from cannot shadow the one PYTHONPATH names
    res = subprocess.run([sys.executable, "-m", "rlobs.cli", "doctor", "--json", str(run.resolve())], capture_output=True,
                         text=True, env=env, cwd="/" if pythonpath else None, timeout=600)
    try:
        return json.loads(res.stdout)["findings"]
    except (ValueError, KeyError) as e:
        raise SystemExit(f"{run}: the doctor gave no JSON report (exit {res.returncode}): {res.stderr[-500:]}") from e


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, required=True, help="folder of run directories")
    ap.add_argument("--only", required=True, help="comma-separated run names")
    ap.add_argument("--before", type=Path, help="another checkout (a worktree) whose rules to compare with")
    ap.add_argument("--rule", default="entropy-collapse", help="a rule whose findings are kept at every severity")
    ap.add_argument("--out", type=Path, required=True, help="output path without suffix")
    a = ap.parse_args(argv)
    if a.before is not None and not (a.before / "rlobs" / "__init__.py").is_file():
        raise SystemExit(f"--before {a.before}: no rlobs package there (a checkout or `git worktree add` folder)")
    sets = {"after": None, **({"before": str(a.before.resolve())} if a.before else {})}
    out: dict[str, dict] = {}
    for name in [n for n in a.only.split(",") if n]:
        run = a.runs / name
        if not (run / "manifest.json").is_file():
            raise SystemExit(f"{run}: not a run directory (no manifest.json)")
        row: dict = {}
        for tag, path in sets.items():
            fs = findings(run, path)
            row[tag] = [[f["rule"], f["severity"].upper(), f.get("first_step")] for f in fs
                        if f["severity"].lower() in ("warning", "critical")]
            row[f"{tag}_{a.rule}"] = [[f["severity"], f.get("first_step")] for f in fs if f["rule"] == a.rule]
        out[name] = row
        moved = "" if "before" not in row or row["before"] == row["after"] else "  <- moved"
        print(name, row.get(f"before_{a.rule}", "-"), row[f"after_{a.rule}"], moved, flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
