"""Sinks: where recorded events go (run record, Prometheus, OpenTelemetry, memory)."""

from rlobs.sinks.base import Sink

__all__ = ["Sink"]
