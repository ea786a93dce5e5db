"""Where the runbooks and generated dashboards are, and the one runbook link setting.

Both ship inside the package (``rlobs/data/runbooks``, ``rlobs/data/dashboards``: links to the top-level
``runbooks/`` and ``dashboards/`` in the source tree, copies in a built wheel) and are read with
``importlib.resources``, so an installed wheel's doctor and app find them.

Runbook links follow one pattern, ``<base>/<id>.md``, and one setting decides the base for the doctor,
the alert rules and ``rlobs observe`` alike: ``--runbook-base-url`` where a command has it, else the
environment variable ``RLOBS_RUNBOOK_BASE_URL`` (a team's fork, wiki or docs site). Unset, alert rules
link rlobs' published pages (an alert is read in a browser, far from this machine) and the doctor and the
app point at the installed page on this machine, which always exists.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

ENV_BASE = "RLOBS_RUNBOOK_BASE_URL"
PUBLISHED_BASE = "https://github.com/rlobs/rlobs/blob/main/runbooks/"

_configured: str | None = None


def data_dir(name: str) -> Path:
    """The installed folder of shipped files: ``runbooks`` or ``dashboards``."""
    if name not in ("runbooks", "dashboards"):
        raise ValueError(f"unknown data folder {name!r}")
    return Path(str(files("rlobs") / "data" / name)).resolve()


def runbook_path(runbook_id: str) -> Path:
    """The installed Markdown page of one alert or doctor rule (it may not exist for an unknown id)."""
    return data_dir("runbooks") / f"{runbook_id}.md"


def configure(base: str | None) -> None:
    """Set the runbook base URL for this process (a command's ``--runbook-base-url``); None: back to the env."""
    global _configured
    _configured = base or None


def base_url(base: str | None = None) -> str | None:
    """The runbook base in force: ``base`` if given, else ``configure``'d, else ``RLOBS_RUNBOOK_BASE_URL``."""
    return base or _configured or os.environ.get(ENV_BASE) or None


def _join(base: str, runbook_id: str) -> str:
    return f"{base if base.endswith('/') else base + '/'}{runbook_id}.md"


def runbook_url(runbook_id: str, base: str | None = None) -> str:
    """An alert's ``runbook_url``: the configured base, else rlobs' published pages."""
    return _join(base_url(base) or PUBLISHED_BASE, runbook_id)


def runbook_link(runbook_id: str, base: str | None = None) -> str:
    """What the doctor prints: the configured base's URL, else the installed page's path on this machine."""
    configured = base_url(base)
    return _join(configured, runbook_id) if configured else str(runbook_path(runbook_id))
