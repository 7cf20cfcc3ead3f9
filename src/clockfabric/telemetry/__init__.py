"""Telemetry: one collector per kind of hardware, each failing on its own (node_exporter's layout)."""
