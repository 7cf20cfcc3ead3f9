"""Collective benchmarks: all-reduce and all-to-all in nccl-tests' columns (command.py), and
all-reduce against link rates and plain TCP (vs_tcp.py)."""
