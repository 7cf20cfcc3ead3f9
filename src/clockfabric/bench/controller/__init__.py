"""Controller and dashboard at scale: storage ingest (ingest.py), simulated agents against
replicas (scale.py, its load in scale_load.py), the bytes samples take (sample_storage.py), and the
dashboard on a synthetic fleet (dashboard.py, the fleet in dashboard_fleet.py)."""
