"""GRPO objective: group-normalised advantages, clipped surrogate, token-level normalisation,
optional KL to a reference, truncated importance sampling for stale samples.

Reference formulation: DeepSeekMath (Shao et al., 2024) GRPO, as used by DeepSeek-R1. Departures,
each deliberate and each what current open trainers (verl, AReaL, slime, DAPO) do:

1. Token-level loss normalisation: the summed per-token loss is divided by the *global* number of
   completion tokens in the batch (DAPO), not averaged per sequence then per group (the paper's
   1/|o_i| per sequence biases towards short answers). The denominator is computed once for the
   whole batch and shared by every micro-batch (and would be by every data-parallel rank).
2. KL to the reference is optional and off by default (``kl_coef = 0``: DAPO, Dr. GRPO); when on it
   is the paper's k3 estimator added to the per-token loss, not folded into the reward, bounded per token at
   ``kl_clamp`` (10, as verl's ``low_var_kl`` and OpenRLHF's k3).
3. Asynchronous samples: the generator's own per-token log-probs (behaviour policy, possibly
   ``staleness`` versions old) differ from the trainer's. The ratio of the clipped surrogate is
   taken against the trainer's log-probs at consumption (the "proximal" policy, AReaL's decoupled
   PPO), and each token is weighted by the truncated importance weight
   ``min(exp(logp_prox - logp_gen), C)`` (TIS, Yao et al. 2025). With one policy-gradient
   iteration per batch (the default) the ratio is 1 and the surrogate's gradient is the plain
   policy gradient times the TIS weight.
4. Advantages are (r - mean) / (std + eps) with the population std (``unbiased=False``) of the
   group; groups whose rewards are all equal contribute zero advantage (they still count in the
   token denominator, as in the paper) and are reported, not silently dropped.
5. One gradient step per batch (no PPO epochs by default); gradient clipping by global norm.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

from probes.advantage import AdvantageHealth, advantage_health


def advantages(rewards: list[list[float]], eps: float = 1e-4) -> list[list[float]]:
    """Per-group (r - mean) / (std + eps), population std, in the same nesting as ``rewards``."""
    out = []
    for rs in rewards:
        r = torch.tensor(rs, dtype=torch.float64)
        std = r.std(unbiased=False) if len(rs) > 1 else torch.tensor(0.0, dtype=torch.float64)
        out.append(((r - r.mean()) / (std + eps)).tolist())
    return out


def group_advantages(rewards: list[list[float]], eps: float = 1e-4,
                     near_zero: float = 1e-2) -> tuple[list[list[float]], AdvantageHealth]:
    """Advantages plus their denominator health, measured by the advantage probe's own function."""
    advs = advantages(rewards, eps)
    return advs, advantage_health(rewards, advantages=advs, eps=eps, ddof=0, near_zero_threshold=near_zero)


def pad_batch(seqs: list[list[int]], starts: list[int], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, T) and completion mask (B, T-1) aligned with next-token targets."""
    t = max(map(len, seqs))
    ids = torch.full((len(seqs), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), t - 1), dtype=torch.float32)
    for i, (s, st) in enumerate(zip(seqs, starts)):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, st - 1:len(s) - 1] = 1.0  # target position j predicts token j+1
    return ids, mask


def length_mask(lengths: list[int], t: int) -> torch.Tensor:
    """Attention mask (B, T) of right-padded sequences: 1 on each sequence's own tokens."""
    return (torch.arange(t).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).long()


def first_scored(mask: torch.Tensor) -> int:
    """The first target position any row of a completion ``mask`` (B, T-1) scores: the positions before it are
    every row's prompt, whose next-token log-probs no loss, probe or KL reads (0 for an empty mask)."""
    cols = mask.bool().any(0).nonzero()
    return int(cols[0]) if len(cols) else 0


@functools.lru_cache(maxsize=None)
def _keeps_logits(cls: type) -> bool:
    """Whether a model class's forward takes ``logits_to_keep`` (transformers' causal LMs since 4.45); read once per
    class (every step calls it)."""
    import inspect

    try:
        return "logits_to_keep" in inspect.signature(cls.forward).parameters
    except (AttributeError, TypeError, ValueError):  # no forward, or one without a signature
        return False


def token_logprobs(model: Any, ids: torch.Tensor, pad_id: int, with_entropy: bool = False,
                   attention_mask: torch.Tensor | None = None, first: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each next token (B, T-1) and optionally the entropy (B, T-1).

    ``attention_mask``: from the sequence lengths (``length_mask``). Without it, positions holding
    ``pad_id`` are masked, which is wrong whenever the pad token also occurs inside a sequence: an
    instruct model whose pad token is its end-of-turn token (SmolLM2: ``<|im_end|>``) has it in every
    chat prompt, and masking those would score another context than the generator's.

    ``first``: the first target position needed (``first_scored(mask)``). The LM head and the softmax over the
    vocabulary run only from there (``logits_to_keep``); positions before it hold 0. With a chat prompt of 80
    tokens and 16 completion tokens that skips 5/6 of a (B, T, vocab) tensor, the largest of the step on a real
    vocabulary (a long prompt on a GPU: its memory too); on SmolLM2 (vocab 49152, 1 CPU thread) a fifth of the
    step's time (``bench/trainer_step_cost.py``). The kept positions' values are the full forward's."""
    if attention_mask is not None:
        attn = attention_mask.to(ids.device)
    else:
        attn = (ids != pad_id).long()
        attn[:, 0] = 1
    t1 = ids.shape[1] - 1
    first = max(0, min(int(first), t1))
    if first > 0 and _keeps_logits(type(model)):
        logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=ids.shape[1] - first).logits[:, :-1].float()
    else:
        first = 0
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()  # (B, T-1, V)
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, ids[:, first + 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1-first)
    ent = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    if first:
        pad = logp.new_zeros((logp.shape[0], first))
        logp = torch.cat([pad, logp], 1)
        ent = torch.cat([pad, ent], 1) if ent is not None else None
    return logp, ent


def k3(log_ratio: torch.Tensor, bound: float = 0.0) -> torch.Tensor:
    """The k3 KL estimator per token, ``(r - 1) - log r`` with ``log r = log_ratio`` (non-negative).

    ``bound`` > 0: the low-variance form verl (``low_var_kl``) and OpenRLHF use for the KL to a reference: ``log r``
    clamped to [-20, 20] for the exponential, the estimate to at most ``bound``. k3 grows as ``r`` where the policy
    has all but dropped a token the reference keeps (a stale sample's token, asynchronous training): unbounded, one
    such token sent trainer_ref's logged KL to 815 nats/token for a step and the KL loss's gradient with it (README
    "Early warning"). A clamped token carries no KL gradient."""
    if bound > 0:
        log_ratio = log_ratio.clamp(-20.0, 20.0)
        return (log_ratio.exp() - 1.0 - log_ratio).clamp(max=bound)
    return log_ratio.exp() - 1.0 - log_ratio


def policy_kl(before: torch.Tensor, after: torch.Tensor, mask: torch.Tensor, behaviour: torch.Tensor | None = None,
              cap: float = 2.0) -> float:
    """KL(policy before an update || after it) per token: the k3 estimator ``(r - 1) - log r`` with
    ``r = p_after / p_before`` of each sampled token (non-negative, unbiased for the KL when the tokens come from
    the policy before). ``before`` / ``after``: log-probs as ``token_logprobs`` returns them; ``mask``: the
    completion tokens. NaN when ``mask`` is empty.

    ``behaviour``: the log-probs of the policy that sampled the tokens (the generator's), when that is not the
    policy before the update (asynchronous training): each token's k3 is then weighted by
    ``p_before / p_behaviour`` truncated at ``cap`` and the weights self-normalised, so the tokens an older
    policy sampled and the current one finds unlikely (where any update moves the log-prob most) count as
    often as the current policy would have sampled them. Token-level correction, as in truncated importance
    sampling: the prefixes are still the older policy's. Without it k3 on stale tokens reads several times the
    on-policy value on a healthy run (README "Early warning")."""
    m = mask.double()
    per_token = k3((after - before).double().clamp(-30.0, 30.0))
    if behaviour is not None:
        m = m * (before - behaviour).double().clamp(-30.0, 30.0).exp().clamp(max=cap)
    n = float(m.sum())
    return float((per_token * m).sum()) / n if n > 0 else float("nan")


def gen_logprob_tensor(gen: list[list[float]], starts: list[int], shape: tuple[int, int]) -> torch.Tensor:
    """Generator log-probs laid out like ``token_logprobs`` (zeros outside the completion)."""
    out = torch.zeros(shape, dtype=torch.float32)
    for i, (lps, st) in enumerate(zip(gen, starts)):
        out[i, st - 1:st - 1 + len(lps)] = torch.tensor(lps, dtype=torch.float32)
    return out


@dataclass
class LossParts:
    loss: torch.Tensor
    tokens: float
    is_ratio_mean: float
    is_ratio_max: float
    is_clipped: float
    ess_sum_w: float
    ess_sum_w2: float
    kl: float
    entropy_sum: float
    dlogp_abs_sum: float
    dlogp_abs_max: float


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, gen_logp: torch.Tensor, adv: torch.Tensor,
              mask: torch.Tensor, token_denominator: float, *, clip_eps: float = 0.2, tis_cap: float = 2.0,
              ref_logp: torch.Tensor | None = None, kl_coef: float = 0.0, kl_clamp: float = 0.0,
              entropy: torch.Tensor | None = None, entropy_coef: float = 0.0) -> LossParts:
    """Per-token clipped surrogate with TIS weights, summed and divided by the global token count.

    logp (B, T): current policy (requires grad); old_logp (B, T): proximal policy (detached);
    gen_logp (B, T): behaviour policy from the generator; adv (B,): sequence advantage; mask (B, T).
    ``kl_clamp``: the per-token bound of the reference KL (``k3``'s ``bound``; 0: none).
    ``entropy`` (B, T): the current policy's token entropy, reported; with ``entropy_coef`` != 0 it must carry the
    graph: the loss subtracts ``entropy_coef`` x entropy per token (verl's ``entropy_coeff``: > 0 a bonus).
    """
    adv_t = adv.unsqueeze(-1)  # (B, 1)
    ratio = torch.exp(logp - old_logp)
    surr = -torch.minimum(ratio * adv_t, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv_t)
    w_raw = torch.exp(old_logp - gen_logp).detach()
    w = torch.clamp(w_raw, max=tis_cap) if tis_cap > 0 else torch.ones_like(w_raw)
    per_tok = w * surr
    kl_val = 0.0
    if ref_logp is not None and kl_coef > 0:
        kl_tok = k3(ref_logp - logp, kl_clamp)
        per_tok = per_tok + kl_coef * kl_tok
        kl_val = float((kl_tok.detach() * mask).sum())
    if entropy_coef and entropy is not None:
        per_tok = per_tok - entropy_coef * entropy
    loss = (per_tok * mask).sum() / token_denominator
    m = mask > 0
    wm = w_raw[m]
    dl = (old_logp - gen_logp).abs()[m]
    return LossParts(loss, float(mask.sum()), float(wm.sum()) if wm.numel() else 0.0,
                     float(wm.max()) if wm.numel() else 0.0,
                     float((wm > tis_cap).sum()) if tis_cap > 0 and wm.numel() else 0.0,
                     float(w[m].sum()), float((w[m] ** 2).sum()), kl_val,
                     float((entropy.detach() * mask).sum()) if entropy is not None else 0.0,
                     float(dl.sum()) if dl.numel() else 0.0, float(dl.max()) if dl.numel() else 0.0)
