"""Every benchmark, registered by importing its module (harness.BENCHMARKS loads this). The
order is the order `clockfabric bench` lists them: the lab, clocks, monitoring, failover, the
collective and path steering, the audit, workload monitoring, packet authentication, fuzzing
the parsers, spares (ZeRO-1's cost apart), the dashboard, the chaos soak."""

from clockfabric.bench import (  # noqa: F401, I001 - imported to register, in listing order
    lab_bringup,
    clocksync,
    clocksync_solve,
    controller_ingest,
    controller_scale,
    sample_storage,
    agent_overhead,
    monitor_latency,
    failover,
    transparent,
    collective,
    allreduce_vs_tcp,
)
from clockfabric.bench.contention import command  # noqa: F401
from clockfabric.bench import (  # noqa: F401, E402, I001
    audit,
    slurm_prolog,
    workload,
    workload_healthy,
    workload_cost,
    auth_cost,
    fuzz,
    spares,
    spares_zero,
    dashboard,
    chaos,
)
