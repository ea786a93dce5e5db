"""Dashboards, alert rules and the local Prometheus stack, all generated from ``rlobs.catalogue``.

- ``selectors``: PromQL helpers that check metric and label names against the catalogue;
- ``model``: boards / rows / panels / queries as plain data; ``boards_ops`` and ``boards_model``
  define the boards; ``render`` turns them into Grafana JSON (grafana-foundation-sdk, imported lazily);
- ``alerts``: alert rules with runbook links and promtool cases; ``build`` writes ``dashboards/``;
- ``observe``: runs Debian's Prometheus over a run directory (``rlobs observe``).

Importing this package imports neither grafana-foundation-sdk nor starts anything.
"""

from rlobs.dashboards.alerts import ALERT_IDS, RULES, runbook_url

__all__ = ["ALERT_IDS", "RULES", "runbook_url"]
