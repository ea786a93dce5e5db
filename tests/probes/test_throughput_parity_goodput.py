"""Throughput meter and predicted staleness; train/serve parity; goodput accounting."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from probes.goodput import GoodputAccount, cost_per_effective_token
from probes.ledger import SampleLedger
from probes.liveness import Liveness
from probes.parity import (ParityProbe, chat_template_hash, config_hashes, logprob_parity, parity_status,
                           sampling_hash, tokenizer_hash)
from probes.throughput import ThroughputMeter, predict_staleness
from tests.probes.conftest import rows


# ---- throughput ---------------------------------------------------------------------------------
def test_predicted_staleness_formula():
    # generator faster, queue of 32 fills: (r*L + Q) / B = (8*2 + 32) / 16
    assert predict_staleness(10, 8, 16, generation_latency_s=2.0, queue_capacity=32) == 3.0
    # trainer faster: the queue drains, only in-flight generation remains: 4*2 / 16
    assert predict_staleness(4, 8, 16, generation_latency_s=2.0, queue_capacity=32) == 0.5
    assert predict_staleness(10, 8, 16, generation_latency_s=2.0) == math.inf  # unbounded queue
    assert predict_staleness(10, 8, 16, generation_latency_s=2.0, max_staleness=4) == 4.0
    assert math.isnan(predict_staleness(0, 8, 16, generation_latency_s=2.0))


def test_throughput_window_exact(live):
    now = [100.0]
    m = ThroughputMeter(window_s=10.0, clock=lambda: now[0])
    m.produced(samples=8, tokens=3200)
    m.effective(samples=6)
    m.add_busy(7.5)
    with m.sync_bubble():
        now[0] += 1.0
    now[0] = 109.0
    assert m.tick() is None  # window not over yet
    now[0] = 110.0
    w = m.tick(predicted_staleness=3.0)
    assert (w.samples_per_s, w.tokens_per_s, w.effective_samples_per_s) == (0.8, 320.0, 0.6)
    assert (w.idle_ratio, w.sync_bubble_s, w.window_s) == (0.25, 1.0, 10.0)
    assert live.value("rlobs_throughput_samples_per_second") == 0.8
    assert live.value("rlobs_throughput_tokens_per_second") == 320.0
    assert live.value("rlobs_effective_throughput_samples_per_second") == 0.6
    assert live.value("rlobs_idle_ratio") == 0.25
    assert live.value("rlobs_sync_bubble_seconds_total") == 1.0
    assert live.value("rlobs_predicted_staleness_versions") == 3.0
    now[0] = 125.0
    w2 = m.tick()  # counters were reset: an idle window; effective unknown
    assert (w2.samples, w2.idle_ratio, w2.effective_samples_per_s, w2.window_s) == (0, 1.0, None, 15.0)
    rec = live.close_and_open()
    assert rows(rec, "select count(*) from throughput") == [(2,)]


# ---- parity -------------------------------------------------------------------------------------
def _tokenizer(eos: str = "</s>", lowercase: bool = True, extra: str | None = None):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, eos: 1, "hello": 2, "world": 3}
    if extra:
        vocab[extra] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase() if lowercase else normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, unk_token="<unk>")


def test_config_hashes_detect_each_difference():
    base = tokenizer_hash(_tokenizer())
    assert tokenizer_hash(_tokenizer()) == base
    assert tokenizer_hash(_tokenizer(eos="<eos>")) != base  # special token
    assert tokenizer_hash(_tokenizer(lowercase=False)) != base  # normalizer
    assert tokenizer_hash(_tokenizer(extra="again")) != base  # vocabulary
    assert tokenizer_hash(_tokenizer().backend_tokenizer) != ""  # the raw tokenizers object works too
    assert chat_template_hash("{{ messages }}") != chat_template_hash("{{ messages }}\n")
    # canonical defaults: an empty dict, vLLM-style defaults and an object agree
    assert sampling_hash({}) == sampling_hash({"temperature": 1.0, "top_k": -1, "max_tokens": 64}) \
        == sampling_hash(SimpleNamespace(temperature=1, top_p=1.0, top_k=0, min_p=None))
    assert sampling_hash({"temperature": 0.7}) != sampling_hash({})
    h = config_hashes(tokenizer=_tokenizer(), chat_template="{{ x }}", sampling={"temperature": 0.7})
    assert set(h) == {"tokenizer", "chat_template", "sampling"} and all(len(v) == 64 for v in h.values())


def test_logprob_parity_exact_and_status():
    gen = np.array([-1.0, -2.0, -0.5])
    train = np.array([-1.01, -2.0, -0.4])
    d = train - gen
    s = logprob_parity(gen, train)
    assert s.tokens == 3
    assert s.mean_abs_dlogp == pytest.approx(0.11 / 3)
    assert s.max_abs_dlogp == pytest.approx(0.1)
    assert s.kl_k1 == pytest.approx(float(np.mean(-d)))
    assert s.kl_k2 == pytest.approx(float(np.mean(d * d / 2)))
    assert s.kl_k3 == pytest.approx(sum(math.expm1(x) - x for x in d) / 3)
    same = logprob_parity(gen, gen)
    assert (same.mean_abs_dlogp, same.kl_k1, same.kl_k2, same.kl_k3) == (0.0, 0.0, 0.0, 0.0)
    assert [parity_status(x) for x in (0.001, 0.007, 0.02, math.nan)] == ["healthy", "watch", "problem", "unknown"]


def test_parity_probe_first_after_sync_hashes_and_samples(live):
    gh = {"tokenizer": "a", "chat_template": "b", "sampling": "c"}
    p = ParityProbe(generator_hashes=gh, trainer_hashes={**gh, "sampling": "zz"})
    gen = [np.array([-1.0, -2.0]), np.array([-0.5])]
    close = [np.array([-1.001, -2.0]), np.array([-0.5])]
    far = [np.array([-1.05, -2.05]), np.array([-0.45])]
    p.observe(gen, close, sample_ids=["a", "b"], step=1)
    p.on_sync(2)
    p.observe(gen, far, sample_ids=["a", "b"], step=2)  # first after sync: sampled
    p.observe(gen, close, sample_ids=["a", "b"], step=3)
    ev = live.events("parity")
    assert [e["first_after_sync"] for e in ev] == [False, True, False]
    assert all(e["hashes_match"] is False and json.loads(e["mismatched_hashes"]) == ["sampling"] for e in ev)
    samples = live.events("parity_sample")
    assert [(s["sample_id"], s["step"]) for s in samples] == [("a", 2), ("b", 2)]
    assert samples[0]["max_abs_dlogp"] == pytest.approx(0.05)
    assert samples[0]["train_logprobs"] == pytest.approx([-1.05, -2.05])
    assert live.value("rlobs_parity_post_sync_abs_logprob_diff_mean") == pytest.approx(0.05)
    assert live.value("rlobs_parity_abs_logprob_diff_mean") == pytest.approx(0.001 / 3)
    assert live.value("rlobs_parity_config_mismatches_total") == 3.0
    assert live.value("rlobs_parity_kl_k3") == pytest.approx(logprob_parity(gen, close).kl_k3)
    p.set_hashes(trainer=gh)
    p.observe(gen, close)
    assert live.events("parity")[-1]["hashes_match"] is True
    rec = live.close_and_open()
    assert rows(rec, "select step, first_after_sync, hashes_match, tokens from parity order by mono_ns") == [
        (1, False, False, 3), (2, True, False, 3), (3, False, False, 3), (None, False, True, 3)]
    assert rows(rec, "select sample_id, len(train_logprobs) from parity_sample order by sample_id") == [
        ("a", 2), ("b", 1)]


# ---- goodput ------------------------------------------------------------------------------------
def test_goodput_categories_ratio_and_cost(live):
    acct = GoodputAccount()
    led = SampleLedger(goodput=acct)
    for sid, tokens in [("s1", 100), ("s2", 50), ("s3", 30), ("s4", 20)]:
        led.generated(sid, tokens=tokens)
    led.dropped("s1", "stale")
    led.dropped("s2", "ttl")
    led.dropped("s3", "grader_error")
    led.dropped("s4", "aborted")
    out = acct.add_batch([200, 120, 80, 40], zero_advantage=[False, True, False, False],
                         truncated_masked=[False, False, False, True])
    assert out == {"effective": 280, "zero_advantage": 120, "truncated": 40}
    step = acct.emit_step(step=5)
    assert step["effective_ratio"] == 280 / 640
    assert (step["stale"], step["expired"], step["grader_error"], step["aborted"]) == (100, 50, 30, 20)
    assert live.value("rlobs_effective_token_ratio") == pytest.approx(280 / 640)
    for cat, tok in [("effective", 280), ("stale", 100), ("expired", 50), ("zero_advantage", 120),
                     ("truncated", 40), ("grader_error", 30), ("aborted", 20)]:
        assert live.value("rlobs_goodput_tokens_total", category=cat) == tok
    empty = acct.emit_step(step=6)  # nothing happened: effective 0 tokens, ratio unknown
    assert math.isnan(empty["effective_ratio"])
    assert acct.total_ratio == 280 / 640
    lv = Liveness()
    lv.add("generation", 6.4, tokens=640)
    lv.add("training", 2.8)
    assert cost_per_effective_token(lv.totals(), 280) == pytest.approx({"generation": 6.4 / 280, "training": 0.01})
    rec = live.close_and_open()
    assert rows(rec, "select step, category, tokens, samples from goodput where step = 5 order by category") == [
        (5, "aborted", 20, 1), (5, "effective", 280, 2), (5, "expired", 50, 1), (5, "grader_error", 30, 1),
        (5, "stale", 100, 1), (5, "truncated", 40, 1), (5, "zero_advantage", 120, 1)]


def test_goodput_rejects_unknown_categories():
    with pytest.raises(ValueError, match="valid: effective"):
        GoodputAccount().add("wasted", 3)
