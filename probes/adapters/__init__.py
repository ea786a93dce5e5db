"""Adapters that connect popular trainers to rlobs probes. Import each explicitly (they import their
framework): ``from probes.adapters.trl import instrument`` (TRL ``GRPOTrainer``)."""
