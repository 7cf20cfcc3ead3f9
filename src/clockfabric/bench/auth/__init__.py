"""The fleet key's benchmarks and tools: what sealing costs (cost.py), and datagrams forged without the
key (forge.py), which the chaos soak and the lab tests send."""
