"""Worker for the 2-rank gloo test of the advantage probe (spawned by torch.multiprocessing)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path


def run_rank(rank: int, world: int, tmp: str, denominators: list[list[float]]) -> None:
    import torch.distributed as dist

    import rlobs
    from probes.advantage import AdvantageProbe

    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg_init", rank=rank, world_size=world)
    try:
        rec = rlobs.init(Path(tmp) / "run", component="trainer", rank=rank, prometheus=True)
        probe = AdvantageProbe()
        agree = []
        for step, per_rank in enumerate(denominators):
            rec.set_step(step)
            h = probe.observe([[0.0, 1.0], [1.0, 1.0]], token_denominator=per_rank[rank])
            agree.append([h.ranks_agree, list(h.rank_denominators)])
        rec.flush()
        text = urllib.request.urlopen(rec.metrics_url, timeout=10).read().decode()
        line = [ln for ln in text.splitlines() if ln.startswith("rlobs_advantage_rank_disagreements_total{")]
        value = float(line[0].rsplit(" ", 1)[1]) if line else 0.0
        Path(tmp, f"rank{rank}.json").write_text(json.dumps({"agree": agree, "disagreements": value,
                                                             "dropped": rec.stats()["dropped_total"]}))
        rlobs.shutdown()
    finally:
        dist.destroy_process_group()
