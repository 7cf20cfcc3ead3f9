"""Controller and dashboard at scale: simulated agents against replicas (scale.py, its load in
scale_load.py), and the dashboard on a synthetic fleet (dashboard.py, the fleet in dashboard_fleet.py)."""
