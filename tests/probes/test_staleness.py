"""Staleness probe: exact histogram, ages, drops by reason, importance-ratio stats."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from probes.staleness import StalenessProbe, VersionTag, importance_stats, record_queue, tag_dispatch
from tests.probes.conftest import rows

BASE = 1_800_000_000_000_000_000  # a fixed "now" in ns


def _tag(version: int, age_s: float) -> VersionTag:
    return tag_dispatch(version, now_ns=BASE - int(age_s * 1e9))


def test_tag_tracks_token_versions_and_round_trips():
    t = tag_dispatch(7, now_ns=123)
    t.saw_version(8)
    t.saw_version(9)
    assert t.rollout_fields() == {"dispatch_version": 7, "min_token_version": 7, "max_token_version": 9}
    assert VersionTag.from_dict(json.loads(json.dumps(t.to_dict()))) == t


def test_importance_stats_exact():
    gen = [np.array([-1.0, -2.0]), np.array([-0.5, -1.0])]
    w = np.array([1.0, 1.0, 4.0, 0.5])
    train = [gen[0] + np.log(w[:2]), gen[1] + np.log(w[2:])]
    s = importance_stats(gen, train, cap=2.0)
    assert s.tokens == 4
    assert s.mean == pytest.approx(1.625)
    assert s.max == pytest.approx(4.0)
    assert s.clipped_ratio == 0.25
    assert s.ess_ratio == pytest.approx(6.5 ** 2 / (4 * 18.25))
    # padded + mask gives the same numbers; on-policy gives ESS 1 and nothing clipped
    pad_g = np.array([[-1.0, -2.0, 0.0], [-0.5, -1.0, 0.0]])
    pad_t = np.array([[-1.0, -2.0, 9.0], [-0.5 + math.log(4), -1.0 + math.log(0.5), 9.0]])
    mask = np.array([[1, 1, 0], [1, 1, 0]])
    assert importance_stats(pad_g, pad_t, cap=2.0, mask=mask) == s
    on = importance_stats(pad_g, pad_g, mask=mask)
    assert (on.mean, on.max, on.clipped_ratio, on.ess_ratio) == (1.0, 1.0, 0.0, 1.0)
    assert math.isnan(importance_stats([], []).mean)


def test_consume_batch_exact_values_record_and_metrics(live):
    probe = StalenessProbe(max_staleness=3, ttl_s=5.0, is_cap=2.0)
    # admission: too stale, too old, kept; a queue-full drop decided by the buffer
    assert probe.admit("old", _tag(2, 1.0), 6, now_ns=BASE, tokens=30) == "stale"
    assert probe.admit("expired", _tag(5, 10.0), 6, now_ns=BASE, tokens=20) == "ttl"
    assert probe.admit("fresh", _tag(5, 1.0), 6, now_ns=BASE) is None
    probe.drop("full", "queue_full", tag=_tag(6, 0.5), now_ns=BASE, tokens=5)
    assert probe.drops == {"stale": 1, "ttl": 1, "queue_full": 1}

    ids = ["a", "b", "c", "d"]
    tags = [_tag(5, 1.0), _tag(5, 2.0), _tag(4, 3.0), _tag(2, 6.0)]
    gen = [np.array([-1.0, -2.0]), np.array([-0.5, -1.0])]
    train = [gen[0], gen[1] + np.log([4.0, 0.5])]
    b = probe.consume(ids, tags, 6, gen_logprobs=gen, train_logprobs=train, now_ns=BASE)
    assert b.histogram == {1: 2, 2: 1, 4: 1}
    assert (b.samples, b.max_staleness, b.mean_staleness) == (4, 4, 2.0)
    assert b.mean_age_s == pytest.approx(3.0) and b.max_age_s == pytest.approx(6.0)
    assert b.importance.clipped_ratio == 0.25

    assert live.value("rlobs_staleness_max_versions") == 4.0
    assert live.value("rlobs_staleness_mean_versions") == 2.0
    assert live.value("rlobs_importance_ratio_max") == pytest.approx(4.0)
    assert live.value("rlobs_importance_ratio_mean") == pytest.approx(1.625)
    assert live.value("rlobs_importance_clipped_ratio") == 0.25
    assert live.value("rlobs_effective_sample_size_ratio") == pytest.approx(6.5 ** 2 / (4 * 18.25))
    assert live.value("rlobs_sample_staleness_versions_bucket", le="1.0") == 2.0
    assert live.value("rlobs_sample_staleness_versions_bucket", le="4.0") == 4.0
    assert live.value("rlobs_sample_age_seconds_sum") == pytest.approx(12.0)
    for reason in ("stale", "ttl", "queue_full"):
        assert live.value("rlobs_samples_total", state="dropped", reason=reason) == 1.0
    assert live.value("rlobs_samples_total", state="consumed", reason="") == 4.0

    rec = live.close_and_open()
    (hist, mx, mean, age, ess), = rows(rec, "select histogram, max_staleness, mean_staleness, max_age_s, "
                                            "ess_ratio from staleness")
    assert json.loads(hist) == {"1": 2, "2": 1, "4": 1}
    assert (mx, mean, round(age, 6)) == (4, 2.0, 6.0)
    got = rows(rec, "select sample_id, state, reason, staleness, round(age_s, 6), tokens from ledger order by mono_ns")
    assert got == [("old", "dropped", "stale", None, 1.0, 30), ("expired", "dropped", "ttl", None, 10.0, 20),
                   ("full", "dropped", "queue_full", None, 0.5, 5), ("a", "consumed", None, 1, 1.0, None),
                   ("b", "consumed", None, 1, 2.0, None), ("c", "consumed", None, 2, 3.0, None),
                   ("d", "consumed", None, 4, 6.0, None)]


def test_version_going_backwards_after_resume_shows_as_negative_staleness(live):
    # a resumed trainer that restarted its version counter at 0 consumes rollouts tagged 10
    b = StalenessProbe().consume(["x", "y"], [_tag(10, 1.0), _tag(9, 1.0)], 0, now_ns=BASE)
    assert b.histogram == {-10: 1, -9: 1} and b.max_staleness == -9
    assert live.value("rlobs_staleness_max_versions") == -9.0


def test_queue_depth_sample(live):
    record_queue("rollout", 12, 64, 3.5)
    assert live.value("rlobs_queue_depth", queue="rollout") == 12.0
    assert live.value("rlobs_queue_capacity", queue="rollout") == 64.0
    assert live.value("rlobs_queue_oldest_age_seconds", queue="rollout") == 3.5
    live.assert_no_drops()


def test_consume_checks_lengths():
    with pytest.raises(ValueError, match="2 sample ids but 1 tags"):
        StalenessProbe().consume(["a", "b"], [_tag(1, 0)], 1)


def test_the_correction_the_loss_applies_travels_with_the_batch(live):
    """A consumer that uses stale samples uncorrected says so (cap 0): the doctor's uncorrected-off-policy rule and
    its live alert read it next to the batch's effective sample size; one that does not say records nothing."""
    gen, train = [np.log([0.5, 0.5, 0.5])], [np.log([0.9, 0.1, 0.5])]
    b = StalenessProbe(correction_cap=0).consume(["a"], [_tag(3, 1.0)], 5, gen_logprobs=gen, train_logprobs=train,
                                                now_ns=BASE)
    assert b.fields()["is_correction_cap"] == 0.0 and b.importance.ess_ratio < 0.8
    assert live.value("rlobs_importance_correction_cap") == 0.0
    assert StalenessProbe().consume(["b"], [_tag(5, 1.0)], 5, now_ns=BASE).fields()["is_correction_cap"] is None


def test_a_bound_on_another_basis_travels_beside_the_dispatch_staleness(live, caplog):
    """trainer_ref's completion basis: the staleness its bound was checked on (from the group's newest token
    version) is recorded as ``max_bounded_staleness`` and its gauge; the dispatch staleness stays what it is. A
    consumer that bounds dispatch records nothing there; a wrong-length list is reported and ignored, never raised
    into training."""
    tags = [_tag(1, 1.0), _tag(1, 1.0), _tag(5, 1.0)]  # two samples of a group dispatched 5 versions back
    b = StalenessProbe().consume(["a", "b", "c"], tags, 6, now_ns=BASE, bounded_staleness=[2, 2, 1])
    assert (b.max_staleness, b.fields()["max_bounded_staleness"]) == (5, 2)
    assert live.value("rlobs_staleness_max_versions") == 5.0
    assert live.value("rlobs_staleness_bounded_max_versions") == 2.0
    assert StalenessProbe().consume(["d"], [_tag(5, 1.0)], 6, now_ns=BASE).fields()["max_bounded_staleness"] is None
    with caplog.at_level("WARNING"):
        odd = StalenessProbe().consume(["e", "f"], [_tag(5, 1.0)] * 2, 6, now_ns=BASE, bounded_staleness=[1])
    assert odd.max_bounded_staleness is None and odd.max_staleness == 1
    assert "bounded staleness values for 2 samples" in caplog.text
    rec = live.close_and_open()
    assert rows(rec, "select max_staleness, max_bounded_staleness from staleness order by mono_ns") == [
        (5, 2), (1, None), (1, None)]


def test_a_consumer_that_bounds_dispatch_exports_no_bounded_gauge(live):
    """No ``rlobs_staleness_bounded_max_versions`` series at all (not a 0) from a consumer that bounds dispatch:
    the staleness alert reads the bounded gauge where a run has one and the dispatch gauge otherwise, and a series
    at 0 would hide the dispatch staleness from it."""
    StalenessProbe().consume(["a"], [_tag(1, 1.0)], 6, now_ns=BASE)
    got = live.scrape()
    assert got["rlobs_staleness_max_versions"] == [({}, 5.0)]
    assert "rlobs_staleness_bounded_max_versions" not in got
