"""Typed sample and group records of the driver.

A ``Group`` is one prompt and its G completions (``Sample``). The driver builds groups from the task
(``Group.from_problem``), sends ``Group.request()`` to the generator, turns what it returns back into
records (``Group.from_dict``) and hands ``Group.to_dict()`` to Ray actors (graders, trainer ranks) and
to the checkpoint (JSON). Unknown keys from the generator (its private flags) are left out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    """One completion, as the generator stamped it (version tags, timing) plus its reward once graded."""

    sample_id: str
    group_id: str
    prompt_idx: int = 0
    prompt: str = ""
    answer: Any = None
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    completion: str = ""
    logprobs: list[float] = field(default_factory=list)
    dispatch_version: int = 0
    dispatch_ns: int = 0
    min_token_version: int | None = None  # versions that produced its tokens (interrupt "resume": a range)
    max_token_version: int | None = None
    finish_reason: str = ""
    gen_seconds: float = 0.0
    t_done: float = 0.0
    interrupts: int = 0
    aborted_tokens: int = 0
    reward: float | None = None

    @property
    def tokens(self) -> int:
        return len(self.completion_ids)

    def tag(self) -> dict[str, int]:
        """The dispatch tag (``probes.VersionTag`` fields); samples from checkpoints older than the dispatch
        stamp: dispatch time = completion - generation time; no token range: the dispatch version."""
        v = self.dispatch_version
        return {"dispatch_version": v,
                "min_token_version": v if self.min_token_version is None else self.min_token_version,
                "max_token_version": v if self.max_token_version is None else self.max_token_version,
                "dispatch_ns": int(self.dispatch_ns or (self.t_done - self.gen_seconds) * 1e9)}

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in _SAMPLE_FIELDS}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Sample":
        return cls(**{k: v for k, v in d.items() if k in _SAMPLE_FIELDS})


@dataclass
class Group:
    """One prompt (a GRPO group): what the generator needs, then its samples once generated."""

    group_id: str
    prompt_idx: int
    prompt: str
    answer: Any
    n: int
    seed: int
    kind: str = ""
    samples: list[Sample] = field(default_factory=list)
    t_done: float = 0.0

    @classmethod
    def from_problem(cls, p: Any, group_size: int, seed: int) -> "Group":
        return cls(group_id=f"p{p.index}", prompt_idx=p.index, prompt=p.prompt, answer=p.answer, n=group_size,
                   seed=seed * 1_000_003 + p.index, kind=p.kind)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.samples)

    def tag(self, basis: str = "dispatch") -> dict[str, int]:
        """The group's tag for the staleness / TTL bounds (GRPO needs the whole group, so every sample shares
        the group's verdict): the oldest dispatch time, and as version the oldest dispatch version
        (``basis="dispatch"``) or the newest version that wrote any of its tokens (``"completion"``)."""
        tags = [s.tag() for s in self.samples]
        v = (max(t["max_token_version"] for t in tags) if basis == "completion"
             else min(t["dispatch_version"] for t in tags))
        return {"dispatch_version": v, "dispatch_ns": min(t["dispatch_ns"] for t in tags)}

    def with_samples(self, samples: list[Sample]) -> "Group":
        return dataclasses.replace(self, samples=list(samples))

    def request(self) -> dict[str, Any]:
        """What ``VLLMGenerator.submit`` / ``generate`` take."""
        return {"group_id": self.group_id, "prompt_idx": self.prompt_idx, "prompt": self.prompt,
                "answer": self.answer, "n": self.n, "seed": self.seed, "kind": self.kind}

    def to_dict(self) -> dict[str, Any]:
        return {**self.request(), "samples": [s.to_dict() for s in self.samples], "t_done": self.t_done}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Group":
        kw = {k: v for k, v in d.items() if k in _GROUP_FIELDS and k != "samples"}
        kw.setdefault("kind", "")
        return cls(**kw, samples=[Sample.from_dict(s) for s in d.get("samples") or []])


_SAMPLE_FIELDS = tuple(f.name for f in dataclasses.fields(Sample))
_GROUP_FIELDS = frozenset(f.name for f in dataclasses.fields(Group))
