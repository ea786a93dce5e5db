"""Verifiable arithmetic task with a long tail of response lengths.

Prompts are generated deterministically from ``(seed, index)`` so a data cursor (an integer) is the
whole dataset state. Two prompt shapes:

* ``add``:   ``"37+45="``            -> completion ``"#82"`` (a few tokens);
* ``chain``: ``"3+14+7+9+...="``     -> completion ``"3,17,24,33,...#61"`` (running sums: scratch work
  whose length grows with the operand count, drawn from a heavy tail).

Every completion ends with ``#<answer>``; graders extract the number after the last ``#`` and check
it exactly. The chain prompts are rare but long, so a synchronous batch waits for its slowest
member while an asynchronous generator keeps its batch full: the workload async modes win on.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

ANSWER_RE = re.compile(r"#(-?\d+)\s*$")
FORMAT_RE = re.compile(r"^(\d+(,\d+)*)?#-?\d+$")


@dataclass(frozen=True, slots=True)
class Problem:
    """One prompt with its verifiable answer."""

    index: int
    prompt: str
    answer: int
    kind: str  # add | chain
    target: str  # reference completion (SFT), without the end-of-sequence token


def make_problem(seed: int, index: int, *, max_operand: int = 40, chain_prob: float = 0.15,
                 max_chain: int = 24) -> Problem:
    """Problem ``index`` of the stream seeded by ``seed`` (pure function of its arguments)."""
    rng = random.Random(seed * 1_000_003 + index)
    if rng.random() < chain_prob:
        # heavy tail: operand count 3..max_chain, mostly short, a few very long
        n = min(max_chain, 3 + int(rng.paretovariate(1.2) * 2))
        ops = [rng.randint(1, 9) for _ in range(n)]
        sums, s = [], 0
        for o in ops:
            s += o
            sums.append(str(s))
        return Problem(index, "+".join(map(str, ops)) + "=", s, "chain", ",".join(sums) + f"#{s}")
    a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
    return Problem(index, f"{a}+{b}=", a + b, "add", f"#{a + b}")


def extract_answer(completion: str) -> int | None:
    """The integer after the last ``#`` at the end of the completion, or None."""
    m = ANSWER_RE.search(completion.strip())
    return int(m.group(1)) if m else None


def well_formed(completion: str) -> bool:
    """Completion follows the format ``[n,n,...]#answer``."""
    return FORMAT_RE.match(completion.strip()) is not None


def corpus(seed: int, n: int) -> list[str]:
    """Prompt + target strings for tokenizer training and SFT."""
    return [p.prompt + p.target for p in (make_problem(seed, i) for i in range(n))]
