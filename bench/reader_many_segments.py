"""`rlobs info` and `rlobs doctor` on a record split into many small segments (issue #21).

    python -m bench.reader_many_segments [--segments 10000] [--rows 2] [--keep DIR]

Builds a record whose ``ledger`` kind is ``--segments`` sealed Parquet segments of ``--rows`` events each
(one segment written through the real writer, then copied under distinct names with its checksum), then
times ``rlobs info --json``, ``rlobs info --verify --json`` and ``rlobs doctor --json`` as child processes
(wall time, peak RSS). Whichever ``rlobs`` is first on PYTHONPATH is measured, so the same command
measures an older checkout too. Saves bench/results/reader_many_segments.json (appends a labelled entry).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def build(run: Path, segments: int, rows: int) -> None:
    import rlobs
    from rlobs.store import SegmentWriter, ensure_manifest

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.rlobs.test_store import _batch

    ensure_manifest(run, run_id="many-segments")
    kdir = run / "events" / "ledger"
    w = SegmentWriter(kdir, "ledger", "p")
    w.write(_batch(rows))
    (seg,) = [p for p in [w.rotate()] if p is not None]
    side = run / "events" / ".sha256" / "ledger" / (seg.name + ".sha256")
    for i in range(1, segments):
        name = f"p.{i:05d}.parquet"
        shutil.copyfile(seg, kdir / name)
        if side.exists():
            shutil.copyfile(side, side.with_name(name + ".sha256"))
    del rlobs


def timed(args: list[str]) -> dict:
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # cwd "/": `python -m` puts the cwd first on sys.path, and the rlobs measured must be PYTHONPATH's
    out = subprocess.run([sys.executable, "-m", "rlobs", *args], capture_output=True, text=True, check=False, cwd="/")
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"args": args[0] + (" --verify" if "--verify" in args else ""), "exit": out.returncode,
            "seconds": round(wall, 2), "peak_rss_mb_upper_bound": round(max(peak, before) / 1024, 1),
            "stderr_tail": out.stderr[-300:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--segments", type=int, default=10_000)
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--label", default="this checkout")
    a = ap.parse_args()
    tmp = None
    if a.keep is not None:
        run = a.keep
    else:
        tmp = tempfile.mkdtemp(prefix="rlobs-many-")
        run = Path(tmp) / "run"
    if not (run / "manifest.json").exists():
        build(run, a.segments, a.rows)

    probe = subprocess.run([sys.executable, "-c", "import rlobs; print(rlobs.__file__)"], capture_output=True,
                           text=True, check=False, cwd="/").stdout.strip()
    results = {"label": a.label, "rlobs_from": str(Path(probe).parent), "segments": a.segments,
               "rows_per_segment": a.rows, "cpus": os.cpu_count(),
               "runs": [timed(["info", str(run), "--json"]), timed(["info", str(run), "--verify", "--json"]),
                        timed(["doctor", str(run), "--json"])]}
    for r in results["runs"]:
        print(f"{r['args']:>16}: {r['seconds']:7.2f} s  exit {r['exit']}")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "reader_many_segments.json"
    prev = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps([*prev, results], indent=2) + "\n")
    print(f"saved {path}")
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
