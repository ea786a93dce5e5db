from __future__ import annotations

import pytest

from rlobs import catalogue, schema
from rlobs.catalogue import MetricSpec, Source


def test_every_kind_has_documented_typed_fields_and_an_arrow_schema():
    for name, kind in schema.KINDS.items():
        assert kind.doc and kind.fields, name
        for f in kind.fields:
            assert f.doc, (name, f.name)
        arrow = schema.arrow_schema(name)
        assert arrow.names[: len(schema.ENVELOPE)] == list(schema.ENVELOPE_NAMES)
        assert arrow.metadata[b"rlobs.schema_version"].decode() == schema.SCHEMA_VERSION


def test_bad_field_definitions_fail_at_definition():
    with pytest.raises(ValueError, match="unknown type"):
        schema.Field("x", "float128", "doc")
    with pytest.raises(ValueError, match="identifier"):
        schema.Field("not an id", "int64", "doc")
    with pytest.raises(ValueError, match="unknown event kind 'nope'; valid: advantage"):
        schema.kind("nope")


def test_schema_version_parsing():
    assert schema.parse_version("1.7") == (1, 7)
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        schema.parse_version("v1")


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="grad_norm", type="gauge", unit="1", help="h"), "start with 'rlobs_'"),
    (dict(name="rlobs_steps", type="counter", unit="1", help="h"), "end in '_total'"),
    (dict(name="rlobs_steps_total", type="gauge", unit="1", help="h"), "end in '_total'"),
    (dict(name="rlobs_sync_time", type="gauge", unit="seconds", help="h"), "suffix '_seconds'"),
    (dict(name="rlobs_x_seconds", type="gauge", unit="ms", help="h"), "unknown unit"),
    (dict(name="rlobs_x", type="summary", unit="1", help="h"), "unknown type"),
    (dict(name="rlobs_x", type="gauge", unit="1", help=" "), "help text"),
    (dict(name="rlobs_x", type="gauge", unit="1", help="h", labels=("sample_id",)), "ids never go in labels"),
    (dict(name="rlobs_x", type="gauge", unit="1", help="h", labels=("run",)), "implicit"),
    (dict(name="rlobs_x", type="histogram", unit="1", help="h"), "explicit buckets"),
    (dict(name="rlobs_x", type="gauge", unit="1", help="h", source=Source("nokind", "set", "a")), "source kind"),
    (dict(name="rlobs_x", type="gauge", unit="1", help="h", source=Source("train_step", "set", "nofield")),
     "field 'nofield' not in kind"),
    (dict(name="rlobs_x", type="gauge", unit="1", help="h", source=Source("train_step", "observe", "loss")),
     "does not fit a gauge"),
    (dict(name="rlobs_x_total", type="counter", unit="1", help="h", source=Source("train_step", "sum")),
     "needs value field"),
    (dict(name="rlobs_x", type="gauge", unit="1", help="h", labels=("queue",),
          source=Source("queue", "set", "depth")), "source labels"),
    (dict(name="rlobs_x", type="gauge", unit="1", help="h", source=Source("scalar", "set", "value", where={"name": ()})),
     "where 'name' is an empty tuple"),
])
def test_metric_spec_mistakes_are_caught_when_defined(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MetricSpec(**kwargs)


def test_catalogue_is_consistent():
    names = [m.name for m in catalogue.METRICS]
    assert len(names) == len(set(names))
    for m in catalogue.METRICS:
        assert not set(m.labels) & catalogue.FORBIDDEN_LABELS
        if m.type == "histogram":
            assert m.buckets and list(m.buckets) == sorted(m.buckets)
    assert "rlobs_telemetry_dropped_total" in catalogue.CATALOGUE
    assert catalogue.exposed_names(catalogue.metric("rlobs_grader_latency_seconds")) == (
        "rlobs_grader_latency_seconds_bucket", "rlobs_grader_latency_seconds_sum", "rlobs_grader_latency_seconds_count")
    with pytest.raises(ValueError, match="unknown metric"):
        catalogue.metric("rlobs_nope")


def test_a_where_tuple_means_any_of_its_values_for_every_reader():
    src = Source("scalar", "set", "value", where={"name": ("rlobs/heldout_success", "eval_reward_mean")})
    assert src.matches({"name": "rlobs/heldout_success"}) and src.matches({"name": "eval_reward_mean"})
    assert not src.matches({"name": "reward_mean"}) and not src.matches({})
    scalar = Source("grader_call", "count", where={"outcome": "timeout"})
    assert scalar.matches({"outcome": "timeout"}) and not scalar.matches({"outcome": "ok"})
    assert src.example_where() == {"name": "rlobs/heldout_success"}
    # every catalogue source: its example event passes its own filter, and no tuple is empty (it would match nothing)
    for m in catalogue.METRICS:
        if m.source is not None:
            assert all(v != () for v in m.source.where.values()), m.name
            assert m.source.matches(m.source.example_where()), m.name
