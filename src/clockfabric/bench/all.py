"""Every benchmark, registered by importing its module (harness.BENCHMARKS loads this). The
order is the order `clockfabric bench` lists them: the lab, clocks, monitoring, failover, the
collective, the audit."""

from clockfabric.bench import (  # noqa: F401
    collective,
    failover,
)
from clockfabric.bench.contention import command  # noqa: F401
