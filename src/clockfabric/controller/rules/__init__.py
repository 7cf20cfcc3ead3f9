"""The rules the controller's vmalert evaluates, shipped inside the package.

- `clockfabric-rules.yml`: the recording and alerting rules (docs/alerts.md). The one copy:
  deploy/prometheus/clockfabric-rules.yml is a link to it, for Prometheus and promtool.
- `engine-bridge.yml`: recording rules for an engine the agents write to and nothing scrapes:
  the `up` series a scrape would give (the agents write their delays under /metrics' names).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
RULES = HERE / "clockfabric-rules.yml"
BRIDGE = HERE / "engine-bridge.yml"
