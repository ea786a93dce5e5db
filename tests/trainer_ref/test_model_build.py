"""Warm-start data: the ``tiny`` preset's SFT batches are the clean reference problems (its cache key
and weights predate packing); ``tiny-packed`` runs a share of its examples on into further problems
with no end-of-sequence token between them, the packing bug its learning benchmark starts from; ``tiny-dot``
ends most of its targets with a full stop after the answer, a format no grader accepts (its most likely answer
is graded wrong where a sample is sometimes right: the early-warning log's entropy-minimisation test)."""

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
    assert _spec_key(PRESETS["tiny-packed"]) == "796066e7bbd1"  # nor did tiny-packed's change with sft_dot
    assert len({_spec_key(s) for s in PRESETS.values()}) == len(PRESETS)


def test_dotted_targets_end_in_a_full_stop_no_grader_accepts() -> None:
    from trainer_ref.graders import GRADERS

    spec = PRESETS["tiny-dot"]
    probs = [p for s in range(20) for p in sft_problems(spec, s, random.Random(0))]
    dotted = [p for p in probs if p.target.endswith(".")]
    assert abs(len(dotted) / len(probs) - spec.sft_dot) < 0.05
    for p in dotted[:50]:
        assert p.target == make_problem(spec.seed + 104729, p.index, chain_prob=spec.sft_chain_prob,
                                        max_chain=spec.sft_max_chain).target + "."
        assert extract_answer(p.target) is None and extract_answer(p.target[:-1]) == p.answer
        for grader in ("exact", "rule"):
            sample = {"completion": p.target, "answer": p.answer, "finish_reason": "stop"}
            assert GRADERS[grader](sample) == 0.0
            assert GRADERS[grader]({**sample, "completion": p.target[:-1]}) == 1.0
    assert "=" not in "".join(p.target for p in probs)  # not packed


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


def test_two_builds_on_an_empty_cache_keep_the_first_published_folder(tmp_path) -> None:
    """Two processes that start on an empty cache both build; the one that finishes second must not delete the
    folder the first published (its process may be loading it): it drops its own copy instead."""
    from trainer_ref.model_build import _publish, build_tiny_arch

    out = build_tiny_arch("llama", out_dir=tmp_path / "m")
    first = (out / "model.safetensors").read_bytes()
    late = tmp_path / "m.tmp999"
    late.mkdir()
    (late / "model.safetensors").write_bytes(b"a later build")
    assert _publish(late, out) == out
    assert (out / "model.safetensors").read_bytes() == first and not late.exists()
    # a forced rebuild replaces it; an incomplete leftover (no weights) is replaced too
    forced = tmp_path / "m.tmp1000"
    forced.mkdir()
    (forced / "model.safetensors").write_bytes(b"forced")
    _publish(forced, out, force=True)
    assert (out / "model.safetensors").read_bytes() == b"forced"
    (out / "model.safetensors").unlink()
    fresh = tmp_path / "m.tmp1001"
    fresh.mkdir()
    (fresh / "model.safetensors").write_bytes(b"fresh")
    _publish(fresh, out)
    assert (out / "model.safetensors").read_bytes() == b"fresh"
