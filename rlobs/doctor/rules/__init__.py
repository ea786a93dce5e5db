"""Doctor rules, one module per concern. Importing this package registers them all."""

from rlobs.doctor.rules import (advantage, aggregates, graders, gradnorm, ledger, parity, precursors,  # noqa: F401
                                record, selection, staleness, throughput, weight_sync)
