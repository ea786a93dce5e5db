"""The Streamlit triage and replay app (``rlobs replay RUN [RUN2]``).

Pages: Triage (doctor findings), Timeline, Weight sync, Graders, Samples, Compare, plus a hidden
Runbook page. ``main.py`` is the script ``streamlit run`` executes; ``views/`` holds one module per
page; ``queries.py`` and ``data.py`` are the DuckDB data access with caching (no streamlit there);
``paths.py`` confines the runs the app may open under one runs root.

Importing this package never imports streamlit (a test enforces it).
"""

from pathlib import Path

MAIN_SCRIPT = Path(__file__).with_name("main.py")

__all__ = ["MAIN_SCRIPT"]
