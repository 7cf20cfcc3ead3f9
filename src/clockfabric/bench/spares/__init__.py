"""Spares benchmarks: spares against checkpoint restarts and torchft (command.py; the failures in
faults.py, the baselines in restart.py and torchft.py), ZeRO-1 in the elastic wrapper (zero.py),
and goodput measured over long runs (goodput.py)."""
