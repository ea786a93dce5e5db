"""Reward graders: exact match, rule-based, sandboxed code execution, and a model judge.

* ``exact``: 1.0 when the number after the last ``#`` equals the answer, else 0.0.
* ``rule``: rule reward: the completion must be well formed (``[n,n,...]#answer``) and stopped by
  the model (not truncated), else 0.0; 1.0 when correct; a wrong answer earns a format credit of
  0.1 plus up to 0.4 for the share of its digits that match the answer's (right-aligned), a dense
  partial-credit signal in the spirit of R1's format + accuracy rewards.
* ``code``: the model's answer text is evaluated as a Python expression inside the bubblewrap
  sandbox (``trainer_ref.sandbox``); the program sends ``repr`` of the value (an int) back on its
  result fd, and the grader compares it with the expected answer *here*, outside the sandbox: the
  expected answer never enters the sandbox, and nothing the program prints or its exit status can
  earn a reward.
* ``judge``: a small LM served by its own vLLM engine scores the completion: the reward is
  exp(mean log-prob of the completion tokens given the prompt) under the judge, in [0, 1].

Every call has a timeout (``GraderWorker.grade``) and is reported as a ``grader_call`` event with
queue wait, latency and outcome. ``GraderWorker`` runs as a Ray actor (a pool of them), or inside
the generator actor when graders are colocated.
"""

from __future__ import annotations

import math
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutTimeout
from typing import Any, Callable

from trainer_ref import faults, telemetry
from trainer_ref.sandbox import run_python
from trainer_ref.task import extract_answer, render_prompt, well_formed


def grade_exact(sample: dict[str, Any]) -> float:
    return 1.0 if extract_answer(sample["completion"]) == sample["answer"] else 0.0


def digit_credit(got: int, want: int) -> float:
    """Share of right-aligned digit positions that agree (length mismatch counts as wrong)."""
    a, b = str(got)[::-1], str(want)[::-1]
    n = max(len(a), len(b))
    return sum(1 for i in range(min(len(a), len(b))) if a[i] == b[i]) / n


def grade_rule(sample: dict[str, Any]) -> float:
    if sample.get("finish_reason") != "stop" or not well_formed(sample["completion"]):
        return 0.0
    got = extract_answer(sample["completion"])
    if got == sample["answer"]:
        return 1.0
    return 0.1 + 0.4 * digit_credit(got, int(sample["answer"])) if got is not None else 0.0


def code_program(sample: dict[str, Any]) -> str:
    """The program run for the code grader: the model's answer text is an expression; its value goes
    back on the result fd (``sys.argv[1]``). The expected answer is not in it."""
    answer_text = sample["completion"].strip().rsplit("#", 1)[-1]
    return ("import os as _os, sys as _sys\n_fd = int(_sys.argv[1])\n"
            f"result = (\n{answer_text}\n)\n"
            "if type(result) is int:\n    _os.write(_fd, repr(result).encode())\n")


_INT = re.compile(r"-?[0-9]{1,64}")


def grade_code(sample: dict[str, Any], timeout_s: float = 5.0) -> float:
    res = run_python(code_program(sample), timeout_s=timeout_s, cpu_s=max(1, int(timeout_s)))
    if res.timed_out:
        raise TimeoutError("sandbox timeout")
    if not res.started:  # the sandbox itself failed (not the program): an error, never a silent 0.0
        raise RuntimeError(f"sandbox did not start: {res.stderr.strip()[-300:]}")
    got = res.result or ""
    return 1.0 if _INT.fullmatch(got) and int(got) == int(sample["answer"]) else 0.0


class JudgeModel:
    """A small LM in its own vLLM engine that scores answers (likelihood judge)."""

    def __init__(self, model_dir: str, max_model_len: int = 256, run_dir: str | None = None,
                 cfg: dict[str, Any] | None = None) -> None:
        import os

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        from transformers import AutoTokenizer
        from vllm import LLM

        if run_dir:
            telemetry.init_component(run_dir, "grader", 100, config=cfg)
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.task = (cfg or {}).get("task", "arith")  # the judge reads the prompt as the policy saw it
        self.llm = LLM(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=max_model_len, seed=0)
        import threading

        self._lock = threading.Lock()  # vLLM's LLM is not thread-safe; the actor serves calls from threads

    def ready(self) -> bool:
        return True

    def score(self, items: list[tuple[str, str]]) -> list[float]:
        """exp(mean completion log-prob | prompt) for each (prompt, completion)."""
        from vllm import SamplingParams

        prompts, spans = [], []
        for prompt, completion in items:
            p = self.tok(render_prompt(self.tok, prompt, self.task), add_special_tokens=False)["input_ids"]
            c = self.tok(completion, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            prompts.append({"prompt_token_ids": p + c})
            spans.append((len(p), len(p) + len(c)))
        with self._lock:
            outs = self.llm.generate(prompts, SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0),
                                     use_tqdm=False)
        scores = []
        for o, (a, b), pr in zip(outs, spans, prompts):
            ids = pr["prompt_token_ids"]
            lps = [o.prompt_logprobs[i][ids[i]].logprob for i in range(a, b)]
            scores.append(math.exp(sum(lps) / max(1, len(lps))))
        return scores


def grade_verbose(sample: dict[str, Any]) -> float:
    """An opt-in *flawed* grader (reward-hacking experiments, issue 18): the rule reward halved plus 0.2 per
    element of shown work (``n,n,...`` before the ``#``) that it never checks, capped at 1.0. A loophole: a
    long made-up chain earns more than a correct bare answer, so training reward can rise while held-out
    exact-match success falls."""
    if sample.get("finish_reason") != "stop" or not well_formed(sample["completion"]):
        return 0.0
    work = sample["completion"].strip().rsplit("#", 1)[0]
    return min(1.0, 0.5 * grade_rule(sample) + 0.2 * (work.count(",") + 1 if work else 0))


GRADERS: dict[str, Callable[[dict[str, Any]], float]] = {"exact": grade_exact, "rule": grade_rule,
                                                         "verbose": grade_verbose}


class GraderWorker:
    """Grades samples with per-call timeouts; a Ray actor in the pool, or embedded in the generator."""

    def __init__(self, kind: str, timeout_s: float = 5.0, run_dir: str | None = None, rank: int = 0,
                 cfg: dict[str, Any] | None = None, judge: Any = None, init_telemetry: bool = True) -> None:
        if run_dir and init_telemetry:
            telemetry.init_component(run_dir, "grader", rank, config=cfg, prometheus=bool((cfg or {}).get("prometheus")))
        self.rank = rank
        self.kind, self.timeout_s, self.judge = kind, timeout_s, judge
        self.fault = faults.from_config(cfg or {})
        self.pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="grader")  # a hung call holds a thread
        self._incarnation = f"{os.getpid()}:{time.time_ns()}"

    def ready(self) -> bool:
        return True

    def incarnation(self) -> str:
        """``pid:start_ns`` of this instance: differs after Ray restarted the actor."""
        return self._incarnation

    def shutdown(self) -> None:
        """Close this process's recorder (a clean end, not a lost process)."""
        telemetry.shutdown()

    def set_run(self, run_dir: str, cfg: dict[str, Any], hashes: dict[str, str] | None = None) -> None:
        """Reuse this actor for another run: its record and fresh probes."""
        telemetry.set_run(run_dir, "grader", self.rank, cfg, None, bool(cfg.get("prometheus")))
        self.fault = faults.from_config(cfg)

    def set_telemetry(self, on: bool) -> None:
        """Probes on/off in this process (telemetry.set_enabled)."""
        telemetry.set_enabled(on)

    def flush_telemetry(self) -> bool:
        """Everything this process recorded so far is in the run record (a reused actor, end of a run)."""
        return telemetry.flush()

    def _tracked(self, sample: dict[str, Any], submitted_ns: int | None = None, step: int | None = None) -> float:
        """One grader call, tracked by the GraderProbe (grader_call event; in flight for the watchdog). The
        event carries the trainer step the grading was submitted at and the sample's dispatch version: this
        process has no step of its own, and placing calls by wall clock misplaces them when grading lags."""
        if not telemetry.enabled():
            return self._one(sample, step)
        t0 = time.perf_counter()
        with telemetry.probe().grader.track(self.kind, sample_id=sample["sample_id"], submitted_ns=submitted_ns,
                                            step=step, policy_version=sample.get("dispatch_version")) as h:
            h.reward = self._one(sample, step)
            if time.perf_counter() - t0 > self.timeout_s:  # the caller gave up on it already
                h.outcome, h.error = "timeout", f"finished after the {self.timeout_s}s timeout"
        return h.reward

    def _one(self, sample: dict[str, Any], step: int | None = None) -> float:
        faults.grader_call(self.fault, sample, self.timeout_s, step)
        if self.kind == "code":
            return grade_code(sample, self.timeout_s)
        if self.kind == "judge":
            import ray

            ref = self.judge.score.remote([(sample["prompt"], sample["completion"])])
            return float(ray.get(ref, timeout=self.timeout_s)[0])
        return GRADERS[self.kind](sample)

    def grade(self, samples: list[dict[str, Any]], submitted_at: float | None = None,
              step: int | None = None) -> list[dict[str, Any]]:
        """Returns [{sample_id, reward, outcome, latency_s, queue_wait_s, error}] in input order. ``step``:
        the trainer step at submission (stamped on the grader_call events)."""
        start = time.time()
        wait = max(0.0, start - submitted_at) if submitted_at else 0.0
        sub_ns = int(submitted_at * 1e9) if submitted_at else None
        futs = [(s, time.perf_counter(), self.pool.submit(self._tracked, s, sub_ns, step)) for s in samples]
        out = []
        for s, t0, fut in futs:
            err, reward, outcome = None, None, "ok"
            try:
                reward = float(fut.result(timeout=max(0.01, self.timeout_s - (time.perf_counter() - t0))))
            except (FutTimeout, TimeoutError) as e:
                outcome, err = "timeout", str(e) or "timeout"
            except Exception as e:  # grader bug or judge failure: the sample is dropped, not the run
                outcome, err = "error", f"{type(e).__name__}: {e}"
            lat = time.perf_counter() - t0
            out.append({"sample_id": s["sample_id"], "reward": reward, "outcome": outcome, "latency_s": lat,
                        "queue_wait_s": wait, "error": err})
        out = faults.rewards(self.fault, samples, out)
        telemetry.heartbeat("grade", f"{len(samples)} samples")
        telemetry.on_phase("grading", time.time() - start)
        return out
