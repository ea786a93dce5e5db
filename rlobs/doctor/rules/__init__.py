"""Doctor rules, one module per concern. Importing this package registers them all."""

from rlobs.doctor.rules import (advantage, graders, gradnorm, ledger, parity, record, staleness,  # noqa: F401
                                throughput, weight_sync)
