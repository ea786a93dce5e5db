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


def make_echo(seed: int, index: int, *, lo: int = 10_000_000, hi: int = 99_999_999) -> Problem:
    """Problem ``index`` of the ``echo`` stream: ``"Repeat 40427945"`` -> ``"#40427945"``."""
    a = random.Random(seed * 1_000_003 + index).randint(lo, hi)
    return Problem(index, f"Repeat {a}", a, "echo", f"#{a}")


@dataclass(frozen=True)
class TaskSpec:
    """A prompt stream and how an instruct model is shown it.

    ``shots``: (prompt, completion) demonstrations put before the prompt as earlier chat turns
    (``render_prompt``), so a chat model sees the ``#answer`` format without a word of instruction."""

    name: str
    doc: str
    shots: tuple[tuple[str, str], ...] = ()

    def problem(self, seed: int, index: int, chain_prob: float = 0.15) -> Problem:
        if self.name == "echo":
            return make_echo(seed, index)
        return make_problem(seed, index, chain_prob=chain_prob)


TASKS: dict[str, TaskSpec] = {
    "arith": TaskSpec("arith", "sums of two operands 0-40 and a long tail of running-sum chains (the tiny models' task)"),
    # SmolLM2-135M (Q4_1 weights) cannot add: with demonstrations it gets the format but 2 % of
    # "n+1=" and 18 % of one-digit sums right at T = 1 (reversing 3 digits: 7 %); it copies an
    # 8-digit number in the format 67 % of the time at T = 1 and 94 % greedily (16 prompts x 8): the
    # sampled-vs-greedy gap GRPO closes in minutes (the rule grader's digit credit grades near misses)
    "echo": TaskSpec("echo", "'Repeat n' -> '#n' for 8-digit n, two demonstrations as chat turns (SmolLM2-135M's task)",
                     shots=(("Repeat 12", "#12"), ("Repeat 5308", "#5308"))),
}


def default_task(model: str) -> str:
    """The task a ``--model`` trains on when ``--task`` is not given: ``arith`` for the tiny presets
    (built for it), ``echo`` for a real instruct model (smollm2 or a folder)."""
    from trainer_ref.model_build import PRESETS

    return "arith" if model in PRESETS else "echo"


def get_task(name: str) -> TaskSpec:
    if name not in TASKS:
        raise ValueError(f"task={name!r}; valid: {', '.join(TASKS)}")
    return TASKS[name]


def chat_messages(text: str, task: str = "arith") -> list[dict[str, str]]:
    """The task's demonstrations as user/assistant turns, then ``text`` as the user's message."""
    out = []
    for q, a in get_task(task).shots:
        out += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return out + [{"role": "user", "content": text}]


def render_prompt(tokenizer: object, text: str, task: str = "arith") -> str:
    """The prompt as the policy sees it: the task's demonstrations and ``text`` as chat turns through
    the tokenizer's chat template with the assistant turn opened (an instruct model's format), or
    ``text`` itself when the tokenizer has no template. The tiny models' template is the bare content,
    so their ``arith`` prompts are the task text unchanged."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(chat_messages(text, task), tokenize=False,  # type: ignore[attr-defined]
                                             add_generation_prompt=True)
    return "".join(q + a for q, a in get_task(task).shots) + text
