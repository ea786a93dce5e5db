"""Every telemetry call of the reference trainer, in one module, and the process's probe objects.

``probe()`` returns this process's ``Probes`` (GradNormProbe, AdvantageProbe, ParityProbe,
StalenessProbe, GraderProbe, ThroughputMeter, GoodputAccount, Liveness, WeightSyncProbe), all sending through one
switchable recorder: ``set_enabled(False)`` turns every probe call and every thin ``on_*`` function
into a NoopRecorder call (the overhead bench toggles it per step). All of them are no-ops before
``init_component`` runs in the process (the recorder is a ``NoopRecorder``) and never raise.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Iterator

import rlobs

_NOOP = rlobs.NoopRecorder()
_on = [True]


def set_enabled(on: bool) -> None:
    """Probes and telemetry on (default) or off (every emit goes to a NoopRecorder)."""
    _on[0] = bool(on)


def enabled() -> bool:
    return _on[0]


def _rec() -> Any:
    return rlobs.get_recorder() if _on[0] else _NOOP


class _Switch:
    """A recorder that forwards to the process's recorder, or to a NoopRecorder while disabled."""

    def __getattr__(self, name: str) -> Any:
        return getattr(rlobs.get_recorder() if _on[0] else _NOOP, name)


SWITCH = _Switch()


class Probes:
    """The probe objects of one process (built lazily from the trainer config by ``probe()``)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        import probes as P

        self.cfg = cfg
        self.grad = P.GradNormProbe(SWITCH, max_norm=float(cfg.get("max_grad_norm", 1.0)))
        self.adv = P.AdvantageProbe(SWITCH, eps=float(cfg.get("adv_eps", 1e-4)), ddof=0)
        self.parity = P.ParityProbe(SWITCH)
        self.staleness = P.StalenessProbe(SWITCH, max_staleness=int(cfg.get("max_staleness", 2)),
                                          ttl_s=float(cfg.get("rollout_ttl_s", 120.0)),
                                          is_cap=float(cfg.get("tis_cap", 2.0)) or 2.0,
                                          correction_cap=float(cfg.get("tis_cap", 2.0)))
        self.goodput = P.GoodputAccount(SWITCH)
        self.liveness = P.Liveness(SWITCH)
        self.throughput = P.ThroughputMeter(SWITCH, window_s=0.0)
        # weight sync across two processes: the trainer dumps and stages, the generator receives
        # (the sender's put time travels in the handoff), loads, resets its cache and closes the lag
        self.wsync_send = P.WeightSyncProbe(SWITCH, required=("dump", "staging"))
        self.wsync_recv = P.WeightSyncProbe(SWITCH, required=("transfer", "load", "cache_reset"))
        self._grader: Any = None

    @property
    def grader(self) -> Any:
        """GraderProbe with its in-flight watchdog (started on first use: grader processes only)."""
        if self._grader is None:
            import probes as P

            self._grader = P.GraderProbe(SWITCH, deadline_s=2 * float(self.cfg.get("grader_timeout_s", 5.0)),
                                         interval_s=1.0)
        return self._grader

    def close(self) -> None:
        if self._grader is not None:
            self._grader.close()
            self._grader = None


_probes: list[Probes | None] = [None]


def probe(cfg: dict[str, Any] | None = None) -> Probes:
    """This process's probes (created on first call; ``cfg`` sets thresholds the first time)."""
    if _probes[0] is None:
        _probes[0] = Probes(dict(cfg or {}))
    return _probes[0]


def init_component(run_dir: str, component: str, rank: int = 0, *, config: dict[str, Any] | None = None,
                   hashes: dict[str, str] | None = None, prometheus: bool = False) -> Any:
    """rlobs.init for this process (driver, trainer, generator, grader); fresh probes from ``config``."""
    if _probes[0] is not None:
        _probes[0].close()
    _probes[0] = Probes(dict(config or {}))
    return rlobs.init(run_dir, component=component, rank=rank, config=config, hashes=hashes, prometheus=prometheus)


def set_run(run_dir: str, component: str, rank: int, config: dict[str, Any], hashes: dict[str, str] | None = None,
            prometheus: bool = False) -> None:
    """Point a reused actor's recorder (and fresh probes) at another run directory."""
    init_component(run_dir, component, rank, config=config, hashes=hashes, prometheus=prometheus)


def parity_hashes(tokenizer: Any, cfg: dict[str, Any]) -> dict[str, str]:
    """probes.config_hashes of one side: tokenizer, chat template and sampling parameters."""
    import probes as P

    return P.config_hashes(tokenizer=tokenizer, chat_template=getattr(tokenizer, "chat_template", None),
                           sampling={"temperature": float(cfg.get("temperature", 1.0)),
                                     "max_tokens": int(cfg.get("max_tokens", 0))})


def shutdown() -> None:
    if _probes[0] is not None:
        _probes[0].close()
    rlobs.shutdown()


def flush(timeout: float = 10.0) -> bool:
    """Write what this process recorded so far to the run record (True when done within ``timeout``)."""
    return bool(rlobs.get_recorder().flush(timeout))


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
    probe().liveness.beat(phase, detail)


def pause(name: str) -> contextlib.AbstractContextManager[Any]:
    """``with pause("eval"):`` around work in which the trainer takes no optimiser step on purpose (held-out
    evaluation, checkpoint save, the drain of in-flight generation: ``rlobs.schema.PAUSE_PHASES``), so the
    no-progress alert allows for it."""
    return probe().liveness.phase(name)


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    with _rec().span(name, **attributes) as sp:
        yield sp


def dispatch_tag(s: dict[str, Any]) -> dict[str, int]:
    """A sample's dispatch tag (``probes.VersionTag`` fields) from what the generator stamped on it
    (samples from checkpoints older than the dispatch stamp: dispatch time = completion - generation time;
    no token-version range: the dispatch version, as ``probes.VersionTag.from_dict``)."""
    v = s["dispatch_version"]
    return {"dispatch_version": v, "min_token_version": s.get("min_token_version", v),
            "max_token_version": s.get("max_token_version", v),
            "dispatch_ns": int(s.get("dispatch_ns") or (s["t_done"] - s["gen_seconds"]) * 1e9)}


def on_rollout(s: dict[str, Any], with_text: bool = True) -> None:
    _rec().emit(
        "rollout", sample_id=s["sample_id"], group_id=s["group_id"], prompt_id=str(s["prompt_idx"]),
        dispatch_version=s["dispatch_version"], min_token_version=s["min_token_version"],
        max_token_version=s["max_token_version"], prompt_tokens=len(s["prompt_ids"]),
        completion_tokens=len(s["completion_ids"]), finish_reason=s["finish_reason"], gen_seconds=s["gen_seconds"],
        prompt=s["prompt"] if with_text else None, completion=s["completion"] if with_text else None,
        logprobs=[float(x) for x in s["logprobs"]], policy_version=s["dispatch_version"])


def on_queue(queue: str, depth: int, capacity: int, oldest_age_s: float | None = None) -> None:
    _rec().emit("queue", queue=queue, depth=depth, capacity=capacity, oldest_age_s=oldest_age_s)


def on_throughput(**fields: Any) -> None:
    _rec().emit("throughput", **fields)


def on_phase(phase: str, seconds: float, tokens: int | None = None) -> None:
    probe().liveness.add(phase, seconds, tokens)


def on_scalar(name: str, value: float, step: int | None = None, source: str = "trainer_ref") -> None:
    _rec().emit("scalar", name=name, value=float(value), source=source, step=step)


def to_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)
