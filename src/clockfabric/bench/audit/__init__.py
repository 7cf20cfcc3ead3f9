"""Audit benchmarks: the fleet audit on a lab (fleet.py) and the Slurm prolog's passive audit of a node
(slurm_prolog.py)."""
