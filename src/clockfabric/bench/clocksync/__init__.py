"""Clock sync benchmarks: the sync on labs against NTP-style and ptp4l (command.py; its report,
traffic and watchers in report.py, traffic.py, watch.py) and the network-effect solve on synthetic
fleets (solve.py)."""
