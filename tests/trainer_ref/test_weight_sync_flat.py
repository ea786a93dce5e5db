"""The first dump flattens a CPU model's tensors into one buffer in stage order (staging is then one
copy); the model, its optimiser, its ties and its checkpoints behave exactly as before."""

from __future__ import annotations

import torch

from probes.staging import _runs, _source
from trainer_ref import checkpoint, weight_sync


def _model(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg)


LAYOUT = weight_sync.EngineLayout({"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]},
                                  {"lm_head.weight": "model.embed_tokens.weight"})


def _step(model, opt, ids):
    loss = model(input_ids=ids, labels=ids).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


def test_flattening_keeps_training_identical_and_staging_is_one_copy(tmp_path):
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(1))
    ref, flat = _model(), _model()
    ref_opt, opt = torch.optim.AdamW(ref.parameters(), lr=1e-2), torch.optim.AdamW(flat.parameters(), lr=1e-2)
    params = {n: p for n, p in flat.named_parameters()}
    before = weight_sync.dump_weights(flat, 1, layout=LAYOUT, flatten=False)
    assert not weight_sync.is_flat(before.state)
    d = weight_sync.dump_weights(flat, 1, layout=LAYOUT)
    assert weight_sync.is_flat(d.state) and d.fingerprints == before.fingerprints
    assert list(d.state) == list(before.state)  # stage order
    assert {n: p for n, p in flat.named_parameters()} == params  # the same Parameter objects
    assert flat.lm_head.weight is flat.model.embed_tokens.weight  # still tied
    for k, v in d.state.items():
        assert v.data_ptr() == flat.get_parameter(k).data_ptr()  # the dump is views of the parameters

    start = {k: v.clone() for k, v in d.state.items()}
    for _ in range(3):  # the optimiser (made before flattening) trains the flattened model as the other
        assert abs(_step(flat, opt, ids) - _step(ref, ref_opt, ids)) < 1e-5
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(flat.state_dict().values(), ref.state_dict().values()))
    assert not torch.equal(d.state["model.layers.0.self_attn.q_proj.weight"], start["model.layers.0.self_attn.q_proj.weight"])

    d2 = weight_sync.dump_weights(flat, 2, layout=LAYOUT)
    assert all(d2.state[k].data_ptr() == d.state[k].data_ptr() for k in d.state)  # flattened once
    buf = weight_sync.StagingBuffer(prefix="rlobs-test-flat")
    try:
        buf.write(d2.state, 2)
        assert len(_runs({k: _source(v) for k, v in d2.state.items()}, buf.entries)) == 1
        views, _ = weight_sync.mapped(buf.handle())
        fused = weight_sync.fused_views(views, LAYOUT)
        assert {k: weight_sync.concat_fingerprint(v) for k, v in fused.items()} == d2.fingerprints
    finally:
        buf.close()

    checkpoint.save_trainer(flat, opt, tmp_path / "ck")  # views of one buffer save as separate tensors
    back = _model(seed=5)
    back_opt = torch.optim.AdamW(back.parameters(), lr=1e-2)
    checkpoint.load_trainer(back, back_opt, tmp_path / "ck")
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), flat.state_dict().values()))


def test_a_reallocated_model_is_flattened_again_and_shared_names_are_left_alone():
    m = _model()
    d = weight_sync.dump_weights(m, 1, layout=LAYOUT)
    with torch.no_grad():
        m.model.norm.weight.data = m.model.norm.weight.data.clone()  # something re-allocated one tensor
    assert not weight_sync.is_flat(weight_sync.dump_weights(m, 2, layout=LAYOUT, flatten=False).state)
    d3 = weight_sync.dump_weights(m, 3, layout=LAYOUT)
    assert weight_sync.is_flat(d3.state) and d3.fingerprints == d.fingerprints

    untied = weight_sync.EngineLayout(LAYOUT.packed, {})  # both tied names sent: the same memory twice
    d4 = weight_sync.dump_weights(m, 4, layout=untied)
    assert d4.state["lm_head.weight"].data_ptr() == d4.state["model.embed_tokens.weight"].data_ptr()
    assert m.lm_head.weight is m.model.embed_tokens.weight
