"""First view of the replay app on a run with 1M samples: Triage and Samples, data access and AppTest.

    python -m bench.app_load [--samples 1000000] [--keep DIR] [--repeats 3]

The record (``bench/app_record.py``: 1M rollouts, 1M grader calls, 2M ledger transitions, per-step kinds)
is written once through the real segment writer. Each measurement runs in a fresh Python process whose
imports (streamlit, altair, duckdb, the doctor) are warmed on a small scenario first, as in a running
``rlobs replay`` server: what is timed is the first view of *this* run (nothing cached for it):

- ``data_*``: the page's data-access calls (``RunData``: open the record, the doctor's report, or the
  first page of samples), best of ``--repeats`` fresh processes;
- ``apptest_*``: ``AppTest`` running the page script on the run, end to end (queries, charts, tables).
  A server discovers the installed Streamlit components once, when it starts; ``AppTest`` re-scans the
  metadata of every installed package for each new instance (0.3-0.5 s on this machine, nothing to do
  with the run), so the timed ``AppTest`` gets the registry the warm-up built, as pages of a server do.
  That scan is timed on its own and saved as ``component_scan_s`` (add it for the harness-bound figure).

Prints and saves JSON to bench/results/app_load.json. Target: <= 2 s per first view.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "app_load.json"
ROOT = Path(__file__).resolve().parents[1]

_CHILD = r'''
import json, os, sys, tempfile, time
from pathlib import Path
root, run, what = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
from rlobs.app import paths
from rlobs.app.data import RunData
from rlobs.app.queries import SampleFilter
from streamlit.testing.v1 import AppTest
from tests.doctor import scenarios
tmp = tempfile.TemporaryDirectory()
warm = Path(tmp.name) / "warm"
scenarios.build(warm, "cache_not_reset", seed=0)
def data_triage(path):
    d = RunData(path); d.report(); d.steps()
def data_samples(path):
    d = RunData(path); b = d.steps(); d.q("distinct_values", "rollout", "finish_reason")
    d.samples_page(SampleFilter(step_lo=b[0], step_hi=b[1]), 200, 0)
components = []  # the component registry of the warm-up run: a server builds it once, at startup
def apptest(path, page):
    os.environ[paths.ENV_ROOT] = str(Path(path).parent); os.environ[paths.ENV_RUNS] = Path(path).name
    at = AppTest.from_file(os.path.abspath(os.path.join("rlobs", "app", "main.py")), default_timeout=300)
    if components and getattr(at, "_bidi_component_manager", False) is None:
        at._bidi_component_manager = components[0]
    if page != "triage":
        at.switch_page(f"views/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    if not components and getattr(at, "_bidi_component_manager", None) is not None:
        components.append(at._bidi_component_manager)
    return at
fn = {"data_triage": data_triage, "data_samples": data_samples,
      "apptest_triage": lambda p: apptest(p, "triage"), "apptest_samples": lambda p: apptest(p, "samples")}[what]
fn(str(warm))                                  # warm imports and code paths on a small run
t0 = time.perf_counter(); out = fn(run); dt = time.perf_counter() - t0
extra = {}
if what == "apptest_triage":
    extra["findings"] = [m.value for m in out.markdown if m.value.startswith("#### ")]
if what == "apptest_samples":
    extra["caption"] = out.caption[0].value
if what.startswith("apptest"):
    from streamlit.components.v2.component_manager import BidiComponentManager
    t0 = time.perf_counter(); BidiComponentManager().discover_and_register_components(start_file_watching=False)
    extra["component_scan_s"] = time.perf_counter() - t0
print(json.dumps({"seconds": dt, **extra}))
tmp.cleanup()
'''


def _child(run: Path, what: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(run.parent), str(run), what], cwd=ROOT, check=False,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, default=None, help="build (or reuse) the record here")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    from bench.app_record import make_app_record

    tmp = tempfile.TemporaryDirectory() if args.keep is None else None
    run = Path(tmp.name) / "run" if tmp else args.keep
    built = None
    if not (run / "manifest.json").exists():
        built = make_app_record(run, args.samples)
    result: dict = {"samples": args.samples, "record": built or "reused", "machine": {
        "python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
        "loadavg_1m_before": round(os.getloadavg()[0], 2)}}
    for what in ("data_triage", "data_samples", "apptest_triage", "apptest_samples"):
        runs = [_child(run, what) for _ in range(args.repeats)]
        secs = sorted(r["seconds"] for r in runs)
        result[what] = {"best_s": round(secs[0], 3), "median_s": round(secs[len(secs) // 2], 3),
                        "all_s": [round(s, 3) for s in secs]}
        for k in ("findings", "caption"):
            if k in runs[0]:
                result[what][k] = runs[0][k]
        if "component_scan_s" in runs[0]:
            result[what]["component_scan_s"] = round(min(r["component_scan_s"] for r in runs), 3)
        print(what, result[what], flush=True)
    result["machine"]["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
    result["target_s"] = 2.0
    result["meets_target"] = {k: result[k]["median_s"] <= 2.0 for k in ("apptest_triage", "apptest_samples")}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if tmp:
        tmp.cleanup()
    return result


if __name__ == "__main__":
    main()
