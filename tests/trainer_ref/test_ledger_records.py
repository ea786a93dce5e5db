"""The driver's ledger is probes.SampleLedger (one transition table), typed records round-trip, and the
drop reasons trainer_ref records are all in the ledger schema (no run-time ValueError like grader_lost)."""

from __future__ import annotations

import pytest


def test_ledger_checks_transitions_and_counts_goodput_once():
    from probes import GoodputAccount
    from probes.ledger import NEXT
    from trainer_ref.ledger import Ledger, LedgerError

    gp = GoodputAccount()
    led = Ledger(goodput=gp)
    led.mark("g1-s0", "g1", "generated", tokens=7)
    led.mark("g1-s0", "g1", "graded")
    led.consumed("g1-s0", staleness=0)
    with pytest.raises(LedgerError, match="consumed -> consumed"):
        led.consumed("g1-s0")
    led.mark("g1-s1", "g1", "generated", tokens=5)
    with pytest.raises(LedgerError, match="drop reason 'grader_lost'"):
        led.dropped("g1-s1", "grader_lost")
    led.dropped("g1-s1", "grader_error")
    assert led.counts() == {"consumed": 1, "dropped": 1}
    assert gp.totals["grader_error"] == [5, 1]  # the ledger told goodput the dropped tokens, once
    assert led.probe.check().ok and "consumed" not in NEXT  # terminal states have no next state
    # the checkpoint form restores into a tracking SampleLedger that keeps checking
    again = Ledger(led.to_json(), goodput=gp)
    assert again.states == {"g1-s0": "consumed", "g1-s1": "dropped"}
    with pytest.raises(LedgerError):
        again.mark("g1-s1", "g1", "graded")


def test_every_trainer_drop_reason_is_in_the_schema():
    from probes.ledger import DROP_REASONS
    from trainer_ref.admission import DROP_REASONS as OURS
    from trainer_ref.admission import check_drop_reasons

    check_drop_reasons()
    assert set(OURS) <= set(DROP_REASONS)
    with pytest.raises(ValueError, match="grader_lost"):
        check_drop_reasons(("stale", "grader_lost"))


def test_group_records_round_trip_and_tag():
    from trainer_ref.records import Group, Sample

    s = [Sample(sample_id=f"p3-s{j}", group_id="p3", dispatch_version=4 + j, dispatch_ns=100 + j,
                min_token_version=4 + j, max_token_version=6 + j, completion_ids=[1] * (j + 2)) for j in range(2)]
    g = Group(group_id="p3", prompt_idx=3, prompt="1+2=", answer="3", n=2, seed=9, kind="chain", samples=s)
    d = g.to_dict()
    assert Group.from_dict({**d, "_private": False}) == g  # unknown generator keys are left out
    assert g.tag() == {"dispatch_version": 4, "dispatch_ns": 100}
    assert g.tag("completion")["dispatch_version"] == 7  # newest version that wrote any of its tokens
    assert g.tokens == 5 and "samples" not in g.request()
