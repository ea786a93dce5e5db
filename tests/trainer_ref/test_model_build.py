"""Warm-start data: the ``tiny`` preset's SFT batches are the clean reference problems (its cache key
and weights predate packing); ``tiny-packed`` runs a share of its examples on into further problems
with no end-of-sequence token between them, the packing bug its learning benchmark starts from."""

from __future__ import annotations

import random

from trainer_ref.model_build import (
    PRESETS,
    _spec_key,
    build_tokenizer,
    sft_batch,
    sft_problems,
)
from trainer_ref.task import extract_answer, make_problem


def test_tiny_preset_data_is_unpacked_and_keeps_its_cache_key() -> None:
    spec = PRESETS["tiny"]
    batch = sft_problems(spec, 3, random.Random(0))
    ref = [make_problem(spec.seed + 104729, 3 * spec.sft_batch + j, chain_prob=spec.sft_chain_prob,
                        max_chain=spec.sft_max_chain) for j in range(spec.sft_batch)]
    assert batch == ref
    assert _spec_key(spec) == "4aaf2479689a"  # the key (folder) every cached tiny build already has
    assert _spec_key(PRESETS["tiny-packed"]) != _spec_key(spec)


def test_packed_examples_run_on_without_eos_and_answer_a_different_problem() -> None:
    spec = PRESETS["tiny-packed"]
    rng = random.Random(spec.seed + 31337)
    batches = [sft_problems(spec, s, rng) for s in range(20)]
    probs = [p for b in batches for p in b]
    packed = [p for p in probs if "=" in p.target]
    share = len(packed) / len(probs)
    assert abs(share - spec.sft_pack) < 0.05, share
    for p in packed[:50]:
        first, rest = p.target.split("#", 1)[0], p.target.split("#", 1)[1]
        assert p.target.startswith(first + "#" + str(p.answer))  # its own answer first ...
        assert "=" in rest and extract_answer(p.target) is not None  # ... then more problems, one final answer
    tok = build_tokenizer(spec.seed, spec.vocab)
    _, lab = sft_batch(tok, packed[:8], "cpu")
    for row, p in zip(lab.tolist(), packed[:8]):
        labels = [t for t in row if t != -100]
        assert labels.count(tok.eos_token_id) == 1 and labels[-1] == tok.eos_token_id  # EOS only at the pack's end
    # the same rng seed gives the same packs (a build is reproducible)
    rng2 = random.Random(spec.seed + 31337)
    assert [sft_problems(spec, s, rng2) for s in range(20)] == batches
