"""Exit codes of the ``rlobs`` command line (documented in README's CLI section).

The doctor's verdict keeps 0 / 1 / 2 so CI scripts can test ``$? -lt 2``; anything that is not a verdict
gets a code of its own (from BSD's sysexits), so "critical finding" never means "bad path" too.
"""

from __future__ import annotations

OK = 0            # success; doctor: healthy
WARNINGS = 1      # doctor: warnings, no critical finding
CRITICAL = 2      # doctor: at least one critical finding
USAGE = 64        # bad arguments or options (EX_USAGE): an unknown flag, a bad --threshold, a missing argument
INPUT = 65        # the input cannot be used (EX_DATAERR): no such run, not a run record, unreadable or unimportable data
UNAVAILABLE = 69  # a tool the command needs is missing (EX_UNAVAILABLE): prometheus, streamlit, an optional extra
