"""Every telemetry call of the reference trainer, in one module.

Thin functions over ``rlobs.get_recorder().emit(...)`` with the schema's kinds, so the trainer's
instrumentation can be swapped for the probes package in one place. All of them are no-ops before
``init_component`` runs in the process (the recorder is a ``NoopRecorder``) and never raise.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Iterator

import rlobs


def init_component(run_dir: str, component: str, rank: int = 0, *, config: dict[str, Any] | None = None,
                   hashes: dict[str, str] | None = None, prometheus: bool = False) -> Any:
    """rlobs.init for this process (driver, trainer, generator, grader)."""
    return rlobs.init(run_dir, component=component, rank=rank, config=config, hashes=hashes, prometheus=prometheus)


def shutdown() -> None:
    rlobs.shutdown()


def dropped() -> int:
    """Events the recorder rejected (schema mistakes) in this process."""
    return int(rlobs.get_recorder().stats().get("dropped_total", 0) or 0)


def set_context(step: int | None = None, version: int | None = None) -> None:
    rec = rlobs.get_recorder()
    if step is not None:
        rec.set_step(step)
    if version is not None:
        rec.set_policy_version(version)


def heartbeat(phase: str, detail: str = "") -> None:
    rlobs.get_recorder().heartbeat(phase, detail)


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    with rlobs.get_recorder().span(name, **attributes) as sp:
        yield sp


def on_span(name: str, start_ns: int, end_ns: int, status: str = "ok", **attributes: Any) -> None:
    """A span that did not run inside one ``with`` block (e.g. a sync that overlaps the next step)."""
    rlobs.get_recorder().emit("span", name=name, start_ns=start_ns, end_ns=end_ns, status=status,
                              attributes=to_json(attributes))


def on_rollout(s: dict[str, Any], with_text: bool = True) -> None:
    rlobs.get_recorder().emit(
        "rollout", sample_id=s["sample_id"], group_id=s["group_id"], prompt_id=str(s["prompt_idx"]),
        dispatch_version=s["dispatch_version"], min_token_version=s["min_token_version"],
        max_token_version=s["max_token_version"], prompt_tokens=len(s["prompt_ids"]),
        completion_tokens=len(s["completion_ids"]), finish_reason=s["finish_reason"], gen_seconds=s["gen_seconds"],
        prompt=s["prompt"] if with_text else None, completion=s["completion"] if with_text else None,
        logprobs=[float(x) for x in s["logprobs"]], policy_version=s["dispatch_version"])


def on_grader_call(sample_id: str, grader_kind: str, queue_wait_s: float, latency_s: float, outcome: str,
                   reward: float | None, error: str | None = None) -> None:
    rlobs.get_recorder().emit("grader_call", sample_id=sample_id, grader_kind=grader_kind, queue_wait_s=queue_wait_s,
                              latency_s=latency_s, outcome=outcome, reward=reward, error=error)


def on_train_step(step: int, **fields: Any) -> None:
    rlobs.get_recorder().emit("train_step", step=step, **fields)


def on_advantage(step: int, **fields: Any) -> None:
    rlobs.get_recorder().emit("advantage", step=step, **fields)


def on_staleness(step: int, **fields: Any) -> None:
    rlobs.get_recorder().emit("staleness", step=step, **fields)


def on_parity(step: int, **fields: Any) -> None:
    rlobs.get_recorder().emit("parity", step=step, **fields)


def on_sync_boundary(version: int, boundary: str, **fields: Any) -> None:
    """One of dump | staging | transfer | load | cache_reset | end_to_end."""
    rlobs.get_recorder().emit("weight_sync", version=version, boundary=boundary, **fields)


def on_ledger(sample_id: str, group_id: str, state: str, *, reason: str | None = None, tokens: int | None = None,
              staleness: int | None = None, age_s: float | None = None) -> None:
    rlobs.get_recorder().emit("ledger", sample_id=sample_id, group_id=group_id, state=state, reason=reason,
                              tokens=tokens, staleness=staleness, age_s=age_s)


def on_queue(queue: str, depth: int, capacity: int, oldest_age_s: float | None = None) -> None:
    rlobs.get_recorder().emit("queue", queue=queue, depth=depth, capacity=capacity, oldest_age_s=oldest_age_s)


def on_throughput(**fields: Any) -> None:
    rlobs.get_recorder().emit("throughput", **fields)


def on_phase(phase: str, seconds: float, tokens: int | None = None) -> None:
    rlobs.get_recorder().emit("phase", phase=phase, seconds=seconds, tokens=tokens)


def on_goodput(step: int, category: str, tokens: int, samples: int) -> None:
    rlobs.get_recorder().emit("goodput", step=step, category=category, tokens=tokens, samples=samples)


def on_scalar(name: str, value: float, step: int | None = None, source: str = "trainer_ref") -> None:
    rlobs.get_recorder().emit("scalar", name=name, value=float(value), source=source, step=step)


def to_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)
