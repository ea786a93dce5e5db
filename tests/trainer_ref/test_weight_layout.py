"""The engine weight layout on tied-embedding Llama / Qwen2 / Qwen3 models (fast, no engine running):
tied names come from the config, fusions from vLLM's own model classes; the dump, its fingerprints,
checkpoints and the trainer's start-up layout check all go through ``weight_sync.EngineLayout``.
The same layout against a running vLLM engine: tests/trainer_ref/test_real_models.py."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load

from trainer_ref import checkpoint, weight_sync
from trainer_ref.model_build import ARCHS, build_tiny_arch

EMB, HEAD = "model.embed_tokens.weight", "lm_head.weight"


def _load(arch: str, tied: bool = True):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(build_tiny_arch(arch, tied=tied)), dtype=torch.float32)


def _engine_info(model, layout: weight_sync.EngineLayout) -> dict:
    """What a vLLM engine serving ``model`` reports (``rlobs_layout``), as the layout predicts it."""
    return {**layout.to_dict(), "params": layout.names(model.state_dict()), "architecture": "x"}


@pytest.mark.parametrize("arch", ARCHS)
def test_tied_model_dump_layout_and_fingerprints(arch: str) -> None:
    m = _load(arch)
    assert m.config.tie_word_embeddings and m.lm_head.weight is m.model.embed_tokens.weight
    lay = weight_sync.EngineLayout.from_model(m)  # vLLM's packed_modules_mapping for config.architectures
    assert lay.aliases == {HEAD: EMB}
    assert lay.packed["qkv_proj"] == ["q_proj", "k_proj", "v_proj"] and lay.packed["gate_up_proj"] == ["gate_proj", "up_proj"]
    sd = m.state_dict()
    # the bug of issue #22: every state-dict name required, lm_head tied -> "dump is missing tensors"
    d = weight_sync.dump_weights(m, 1, expected=sd.keys(), layout=lay)
    sent = load(d.payload)
    assert HEAD not in sent and set(sent) == set(sd) - {HEAD}
    names = set(d.fingerprints)
    assert names == set(lay.names(sd))
    a = "model.layers.1.self_attn."
    assert a + "qkv_proj.weight" in names and a + "q_proj.weight" not in names and HEAD not in names
    assert d.shapes[a + "qkv_proj.weight"] == [2 * 32 + 32 + 32, 64]  # GQA: q, k, v of different sizes
    assert d.shapes["model.layers.0.mlp.gate_up_proj.weight"] == [256, 64]
    if arch == "qwen2":  # q/k/v biases are fused like the weights
        assert d.shapes[a + "qkv_proj.bias"] == [128] and a + "q_proj.bias" not in names
    if arch == "qwen3":  # per-head q/k norms are neither fused nor renamed
        assert a + "q_norm.weight" in names and a + "k_norm.weight" in names
    # fused = concatenation in vLLM's shard order (q, k, v), recoverable part by part
    q, k, v = torch.split(lay.apply(sd)[a + "qkv_proj.weight"], [64, 32, 32])
    assert torch.equal(q, sd[a + "q_proj.weight"]) and torch.equal(v, sd[a + "v_proj.weight"])
    assert torch.equal(k, sd[a + "k_proj.weight"])
    # a change of the shared embedding (= the output head) changes exactly its one fingerprint
    with torch.no_grad():
        m.lm_head.weight[5, 3] += 0.5
    d2 = weight_sync.dump_weights(m, 2, expected=sd.keys(), layout=lay)
    assert [n for n in names if d.fingerprints[n] != d2.fingerprints[n]] == [EMB]


def test_tied_dump_loads_back_with_the_tie() -> None:
    """The payload is a complete checkpoint for the model: a fresh instance loads it with only the
    tied alias missing, stays tied, and computes the same logits."""
    from transformers import AutoModelForCausalLM

    m = _load("qwen2")
    with torch.no_grad():
        m.model.embed_tokens.weight.mul_(1.5)
    d = weight_sync.dump_weights(m, 1, layout=weight_sync.EngineLayout.from_model(m))
    fresh = AutoModelForCausalLM.from_config(m.config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(load(d.payload), strict=False)
    assert missing == [HEAD] and unexpected == []
    assert fresh.lm_head.weight is fresh.model.embed_tokens.weight
    ids = torch.tensor([[3, 17, 42, 9]])
    with torch.no_grad():
        assert torch.equal(fresh(ids).logits, m(ids).logits)


def test_untied_model_sends_its_head() -> None:
    m = _load("qwen3", tied=False)
    lay = weight_sync.EngineLayout.from_model(m)
    assert lay.aliases == {}
    d = weight_sync.dump_weights(m, 1, expected=m.state_dict().keys(), layout=lay)
    assert HEAD in d.fingerprints and HEAD in load(d.payload)


def test_engine_layout_check_names_what_disagrees() -> None:
    """Trainer start-up: the engine's report must match the trainer model one to one."""
    m = _load("llama")
    lay = weight_sync.EngineLayout.from_model(m)
    info = _engine_info(m, lay)
    assert weight_sync.EngineLayout.from_engine(m, info) == lay
    with pytest.raises(ValueError, match="tied tensors"):  # an engine that did not tie the head
        weight_sync.EngineLayout.from_engine(m, {**info, "aliases": {}, "params": info["params"] + [HEAD]})
    with pytest.raises(ValueError, match="only in the engine: .*rotary"):
        weight_sync.EngineLayout.from_engine(m, {**info, "params": info["params"] + ["model.rotary.x"]})
    with pytest.raises(ValueError, match="only in the trainer: .*q_proj"):  # an engine that does not fuse
        weight_sync.EngineLayout.from_engine(m, {**info, "packed": {}})


def test_tied_checkpoint_round_trip(tmp_path) -> None:
    """safetensors refuses shared storage: the checkpoint stores the tied tensor once and the tie
    survives the load (resume of a tied model)."""
    m = _load("llama")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    m(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    opt.step()
    checkpoint.save_trainer(m, opt, tmp_path)
    m2 = _load("llama")
    opt2 = torch.optim.AdamW(m2.parameters(), lr=1e-2)
    checkpoint.load_trainer(m2, opt2, tmp_path)
    assert m2.lm_head.weight is m2.model.embed_tokens.weight
    for k, v in m.state_dict().items():
        assert torch.equal(v, m2.state_dict()[k]), k
    (tmp_path / "model.safetensors").write_bytes(
        __import__("safetensors.torch", fromlist=["save"]).save({"model.norm.weight": torch.ones(64)}))
    with pytest.raises(RuntimeError, match="does not fit"):
        checkpoint.load_trainer(m2, opt2, tmp_path)


def test_check_model_dir_says_what_is_missing(tmp_path) -> None:
    from trainer_ref.model_build import check_model_dir

    assert check_model_dir(build_tiny_arch("qwen3")) == str(build_tiny_arch("qwen3"))
    with pytest.raises(ValueError, match="not a folder"):
        check_model_dir(tmp_path / "nope")
    with pytest.raises(ValueError, match="no config.json"):
        check_model_dir(tmp_path)
