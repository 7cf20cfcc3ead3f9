"""Workload monitoring: the jobs on a host and their TCP flows.

  jobs.py     which job a process belongs to, from its environment and cgroup (pure)
  flows.py    sock_diag readings in, per-flow rates out; flow keys as labels (pure)
  procfs.py   /proc read: processes' job variables, start times, namespaces, socket inodes
  monitor.py  each update: processes -> jobs, sockets -> processes -> jobs, with rates
  samples.py  a view as the samples pushed to the controller
  run.py      `clockfabric job run`: a command run as a named job
"""
