"""A writer process for crash tests: emits events forever, printing progress, until killed."""

from __future__ import annotations

import sys
import time

import rlobs


def main() -> None:
    run_dir, component = sys.argv[1], sys.argv[2]
    rec = rlobs.init(run_dir, component=component, prometheus=False, flush_interval=0.5)
    i = 0
    while True:
        for _ in range(200):
            rec.emit("ledger", sample_id=f"s{i}", state="generated", tokens=i % 97, step=i // 1000)
            i += 1
        print(f"{time.time_ns()} {i}", flush=True)
        time.sleep(0.01)


if __name__ == "__main__":
    main()
