"""The host agent's services, one module each; importing this package registers them all, in
the order the agent builds and starts them (and stops them, reversed)."""

from clockfabric.agent.services import (  # noqa: F401, I001 - imported to register, in this order
    clock, claims, lldp, failover, telemetry, workload, qos, controller)
