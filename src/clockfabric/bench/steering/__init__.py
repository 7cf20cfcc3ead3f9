"""Path control under load: a DDP job through link and NIC failures (failover.py), and transparent
mode steering it around elephant flows (transparent.py, its traces in transparent_trace.py)."""
