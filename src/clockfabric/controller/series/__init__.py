"""Samples live in a time-series engine (VictoriaMetrics), not in the controller's database.

- `engine`: a single-node victoria-metrics on loopback, started and supervised by the controller
  when no engine URL is given, its data beside the controller's database;
- `gate`: vmauth in front of the engine's import path, one user per host whose credential is the
  host's push credential (auth.credential) and whose route pins the `host` label;
- `read`: `Series`, the one reader of samples, over the engine's PromQL query API, each query
  within a time budget; `promql`: the text of its selectors, and host names in slices short enough
  for one query.

The agent writes samples in serieswire's lines straight to the gate: they never pass through the
controller's Python.
"""
