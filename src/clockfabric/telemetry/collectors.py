"""Every telemetry collector, one module each; importing this module registers them all, in
the order they run (and are listed in /metrics)."""

from clockfabric.telemetry import (  # noqa: F401, I001 - imported to register, in this order
    nic, links, lldp_neighbours, rdma, nvidia_gpu, amd_gpu)
