"""GRPO objective against hand-computed values."""

from __future__ import annotations

import math

import torch

from trainer_ref import grpo


def test_group_advantages_exact():
    advs, st = grpo.group_advantages([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5], [0.0, 0.001]], eps=1e-4)
    a = 0.5 / (0.5 + 1e-4)
    assert advs[0] == [a, -a, -a, a]
    assert advs[1] == [0.0, 0.0]
    assert st.groups == 3 and st.zero_std_groups == 1 and st.near_zero_std_groups == 1
    assert math.isclose(advs[2][1], 0.0005 / (0.0005 + 1e-4))
    assert math.isclose(st.denom_min, 1e-4) and math.isclose(st.denom_max, 0.5 + 1e-4)


def test_pad_batch_mask_aligns_with_targets():
    ids, mask = grpo.pad_batch([[5, 6, 7, 8], [5, 9]], [2, 1], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8], [5, 9, 0, 0]]
    # row 0: completion tokens 7, 8 are predicted at positions 1, 2
    assert mask.tolist() == [[0, 1, 1], [1, 0, 0]]


def test_loss_token_level_normalisation_and_tis():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]], requires_grad=True)
    old = logp.detach()
    gen = torch.tensor([[-1.0, -3.0], [-0.5, 0.0]])  # token (0,1): exp(-2 - -3) = e > cap 2
    adv = torch.tensor([1.0, -2.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    parts = grpo.grpo_loss(logp, old, gen, adv, mask, token_denominator=3.0, tis_cap=2.0)
    # ratio = 1 -> per-token loss = -w * A ; w = [1, 2 (capped)], [1]
    expected = (-(1 * 1.0) - (2 * 1.0) - (1 * -2.0)) / 3.0
    assert math.isclose(float(parts.loss.detach()), expected, rel_tol=1e-6)
    parts.loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-1 / 3, -2 / 3], [2 / 3, 0.0]]))
    assert parts.is_clipped == 1.0 and math.isclose(parts.is_ratio_max, math.e, rel_tol=1e-6)


def test_kl_k3_is_zero_at_reference():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    parts = grpo.grpo_loss(logp, logp.detach(), logp.detach(), torch.tensor([0.0]), torch.ones(1, 2), 2.0,
                           ref_logp=logp.detach().clone(), kl_coef=0.1)
    assert float(parts.loss.detach()) == 0.0 and parts.kl == 0.0


def test_kl_to_the_reference_is_bounded_per_token_and_a_bounded_token_adds_no_gradient():
    """A token the policy has all but dropped while the reference keeps it (log ratio 8: k3 = e^8 - 9, ~2972 nats)
    reads kl_clamp (10) in the logged KL and adds no KL gradient; an ordinary token (log ratio 0.5) is the exact
    k3 with its gradient; kl_clamp 0 is the unbounded estimate (trainer_ref before 6 Dec 2026)."""
    ref = torch.tensor([[-1.0, -1.0]])
    logp = torch.tensor([[-9.0, -1.5]], requires_grad=True)
    mask, zero = torch.ones(1, 2), torch.tensor([0.0])
    small = math.exp(0.5) - 1.0 - 0.5
    parts = grpo.grpo_loss(logp, logp.detach(), logp.detach(), zero, mask, 2.0, ref_logp=ref, kl_coef=0.1,
                           kl_clamp=10.0)
    assert math.isclose(parts.kl, 10.0 + small, rel_tol=1e-6)
    parts.loss.backward()
    # d k3 / d logp = 1 - exp(ref - logp): the bounded token's is 0, the other's 0.1 x (1 - e^0.5) / 2 tokens
    assert logp.grad[0, 0] == 0.0
    assert math.isclose(float(logp.grad[0, 1]), 0.1 * (1.0 - math.exp(0.5)) / 2.0, rel_tol=1e-5)
    free = grpo.grpo_loss(logp.detach(), logp.detach(), logp.detach(), zero, mask, 2.0, ref_logp=ref, kl_coef=0.1)
    assert math.isclose(free.kl, math.exp(8.0) - 9.0 + small, rel_tol=1e-5)


def test_policy_kl_is_the_k3_estimate_of_the_update():
    """KL(before || after) per completion token, k3 = (r - 1) - log r with r = p_after / p_before; padding and
    prompt positions (mask 0) do not count; an update that changes nothing measures 0."""
    before = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -9.0, -9.0]])
    after = torch.tensor([[-1.5, -1.0, -0.5], [-0.3, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    k3 = [math.exp(-0.5) - 1 + 0.5, math.exp(1.0) - 1 - 1.0, 0.0, 0.0]
    assert math.isclose(grpo.policy_kl(before, after, mask), sum(k3) / 4, rel_tol=1e-9)
    assert grpo.policy_kl(before, before.clone(), mask) == 0.0
    assert math.isnan(grpo.policy_kl(before, after, torch.zeros_like(mask)))
    # the estimate's mean over tokens sampled from p_before is KL(p_before || p_after)
    torch.manual_seed(0)
    p0, p1 = torch.softmax(torch.randn(6), -1), torch.softmax(torch.randn(6), -1)
    toks = torch.multinomial(p0, 200_000, replacement=True)
    est = grpo.policy_kl(p0.log()[toks][None], p1.log()[toks][None], torch.ones(1, toks.numel()))
    exact = float((p0 * (p0.log() - p1.log())).sum())
    assert math.isclose(est, exact, rel_tol=0.05), (est, exact)


def test_policy_kl_on_tokens_an_older_policy_sampled_is_importance_weighted():
    """Asynchronous training scores tokens an older policy sampled. Plain k3 on them is not KL(before || after):
    the tokens the older policy liked and the current one does not are over-represented. Weighting by
    p_before / p_behaviour (truncated, self-normalised) recovers it; when the behaviour policy is the policy
    before (synchronous training) the weights are 1 and nothing changes."""
    torch.manual_seed(1)
    p_mu = torch.tensor([0.4, 0.3, 0.2, 0.1])  # the generator's (stale) policy
    p0 = torch.tensor([0.85, 0.08, 0.05, 0.02])  # the trainer's, sharper a few updates later
    # this update moves every logit by as much: the rare tokens' log-probs move most
    p1 = torch.softmax(p0.log() + torch.tensor([0.3, -0.5, 0.6, -0.7]), -1)
    exact = float((p0 * (p0.log() - p1.log())).sum())
    toks = torch.multinomial(p_mu, 400_000, replacement=True)
    before, after, gen = p0.log()[toks][None], p1.log()[toks][None], p_mu.log()[toks][None]
    ones = torch.ones(1, toks.numel())
    plain = grpo.policy_kl(before, after, ones)
    weighted = grpo.policy_kl(before, after, ones, behaviour=gen, cap=50.0)
    assert abs(weighted - exact) < 0.03 * exact, (weighted, exact)
    assert abs(plain - exact) > 0.1 * exact, (plain, exact)  # the uncorrected reading is off
    # truncation at the default cap moves it, but keeps it nearer the KL than no correction
    assert abs(grpo.policy_kl(before, after, ones, behaviour=gen) - exact) < abs(plain - exact)
    # on-policy tokens: weights 1, the plain estimate exactly
    assert grpo.policy_kl(before, after, ones, behaviour=before.clone()) == plain


def test_logprobs_of_padded_batch_equal_unpadded_even_when_pad_occurs_inside():
    """SmolLM2's pad token is its end-of-turn token, present in every chat prompt: the attention mask
    must come from the lengths (a pad-id mask scores another context than the generator saw)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2)).eval()
    pad = 2
    seqs = [[1, 5, 2, 7, 2, 9, 4], [1, 6, 2, 3]]  # the pad id inside both sequences
    ids, _ = grpo.pad_batch(seqs, [3, 3], pad)
    with torch.no_grad():
        got, _ = grpo.token_logprobs(m, ids, pad, attention_mask=grpo.length_mask([len(s) for s in seqs], ids.shape[1]))
        old, _ = grpo.token_logprobs(m, ids, pad)
        for i, s in enumerate(seqs):
            alone, _ = grpo.token_logprobs(m, torch.tensor([s]), pad, attention_mask=torch.ones(1, len(s), dtype=torch.long))
            assert torch.allclose(got[i, :len(s) - 1], alone[0], atol=1e-5)
    assert not torch.allclose(old[0, :6], got[0, :6], atol=1e-3)  # the pad-id mask got it wrong


def test_logprobs_from_the_first_completion_position_equal_the_full_forward_there():
    """``first`` skips the prompt's positions in the LM head and softmax: on every completion token the log-prob,
    the entropy and the gradient they carry are the full forward's; positions before ``first`` are 0."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, num_key_value_heads=2))
    seqs = [[1, 5, 8, 7, 3, 9, 4, 11], [1, 6, 9, 3, 12, 5], [1, 7, 7, 2, 30, 31, 32, 33, 34]]
    starts = [5, 4, 6]  # prompts of different lengths: the earliest completion decides
    ids, mask = grpo.pad_batch(seqs, starts, 0)
    attn = grpo.length_mask([len(s) for s in seqs], ids.shape[1])
    first = grpo.first_scored(mask)
    assert first == 3 and mask[:, :first].sum() == 0 and mask[1, first] == 1
    grads = []
    outs = []
    for f in (0, first):
        m.zero_grad()
        lp, ent = grpo.token_logprobs(m, ids, 0, with_entropy=True, attention_mask=attn, first=f)
        ((lp + 0.1 * ent) * mask).sum().backward()
        outs.append((lp.detach(), ent.detach()))
        grads.append(torch.cat([p.grad.flatten() for p in m.parameters()]))
    (full_lp, full_ent), (cut_lp, cut_ent) = outs
    on = mask.bool()
    assert cut_lp.shape == full_lp.shape == mask.shape
    assert torch.allclose(cut_lp[on], full_lp[on], atol=1e-6) and torch.allclose(cut_ent[on], full_ent[on], atol=1e-6)
    assert (cut_lp[:, :first] == 0).all() and (cut_ent[:, :first] == 0).all()
    assert not (full_lp[:, :first] == 0).all()  # the full forward did compute them
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    assert grpo.first_scored(torch.zeros(2, 5)) == 0


def test_a_failing_policy_kl_rescore_costs_the_step_nothing():
    """The re-score after the update is a measurement: when it fails (out of memory, say) the step goes on, the
    value is None and the re-score is off for the rest of the run."""
    from types import SimpleNamespace

    from trainer_ref.trainer import Trainer, _Backward

    def broken(**_kw):
        raise RuntimeError("CUDA out of memory")

    me = SimpleNamespace(model=broken, pad_id=0, cfg={"policy_change_samples": 16})
    b = _Backward()
    b.rescore = (torch.ones(2, 4, dtype=torch.long), torch.ones(2, 4), torch.ones(2, 3), torch.zeros(2, 3),
                 torch.zeros(2, 3))
    assert Trainer._policy_kl(me, b) is None
    assert me.cfg["policy_change_samples"] == 0
    assert Trainer._policy_kl(me, _Backward()) is None  # nothing kept to re-score: not measured


def test_entropy_coefficient_subtracts_the_token_mean_entropy_and_its_gradient_flows():
    """verl's ``entropy_coeff``: the loss falls by coef x the entropy of the scored tokens (over the same token
    denominator as the surrogate); a masked token's entropy counts for nothing; the gradient reaches the logits."""
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]], [[0.0, 0.0, 0.0], [3.0, -3.0, 0.0]]],
                          requires_grad=True)
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all[..., 0]
    ent = -(logp_all.exp() * logp_all).sum(-1)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([0.0, 0.0])  # no policy-gradient term: only the entropy's
    base = grpo.grpo_loss(logp, logp.detach(), logp.detach(), adv, mask, 3.0, entropy=ent)
    bonus = grpo.grpo_loss(logp, logp.detach(), logp.detach(), adv, mask, 3.0, entropy=ent, entropy_coef=0.1)
    scored = float((ent.detach() * mask).sum())
    assert float(base.loss.detach()) == 0.0
    assert math.isclose(float(bonus.loss.detach()), -0.1 * scored / 3.0, rel_tol=1e-6)
    assert math.isclose(bonus.entropy_sum, scored, rel_tol=1e-6)
    bonus.loss.backward()
    assert logits.grad[0].abs().sum() > 0 and logits.grad[1, 1].abs().sum() == 0  # the masked token: no gradient
    # a bonus step (-grad) raises the entropy of a peaked token; a minimising coefficient would lower it
    with torch.no_grad():
        stepped = torch.log_softmax(logits - 1.0 * logits.grad, -1)
        assert -(stepped.exp() * stepped).sum(-1)[0, 0] > ent[0, 0]
