"""Workload monitoring benchmarks: root cause of injected faults (command.py, the controller's
stages in stages.py), false alarms on healthy jobs (healthy.py), and what monitoring costs
(cost.py, a DDP job's side in cost_ddp.py); the jobs on a lab they share, in jobs.py."""
