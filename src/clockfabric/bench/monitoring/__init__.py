"""Fleet monitoring benchmarks: what an agent costs its host (agent_overhead.py), link flap to
event (latency.py, its matching in latency_match.py), and the chaos soak (chaos.py, its faults
in chaos_faults.py)."""
