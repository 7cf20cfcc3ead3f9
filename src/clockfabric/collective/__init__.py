"""Our own path-aware collective transport and an nccl-tests-style benchmark (all-reduce, all-to-all).

    ring.py       the all-reduce algorithms (ring, hierarchical) over `Links`: numpy buffers, no sockets
    alltoall.py   the all-to-all algorithms (pairwise, oneshot) over `Links`, and their check values
    options.py    CollectiveOptions: every knob of a run, checked once, carried to the workers as JSON
    transport.py  TCP subflows per peer pair, each pinned to a plane: the real `Links`
                  (with wire, tcpinfo, messages, sending, receiving)
    schedule.py   what a sender knows of each subflow (SubflowState); chunks cut to it
    schedulers/   which subflow carries each chunk: ecmp, least-outstanding, owd (SCHEDULERS)
    worker.py     one rank on one host: connect, time, check, print JSON lines
    placement.py  a rank's learned source ports, spines, standbys and receive buffer shares
    claims.py     the spine ledger the agents keep for learned placement, and a rank's ask
    run.py        the launcher: run_collective(fleet, hosts, options, sizes=...) -> CollectiveResult,
                  and allreduce(...), alltoall(...) with the options as keywords
    expected.py   expected_busbw_gbps(), expected_alltoall_busbw_gbps(): what link rates allow
    results.py    rows and nccl-tests' algbw / busbw formulas
    sizes.py      '64M' -> 67108864

`alltoall` here is the module (the algorithms); the launcher's alltoall() is
clockfabric.collective.run.alltoall, or run_collective(fleet, hosts, CollectiveOptions(collective="alltoall"), ...).

Names below load on first use, so a worker (ring + transport) starts without the topology
and hosts modules.
"""

from importlib import import_module

_EXPORTS = {"allreduce": "run", "run_collective": "run", "expected_busbw_gbps": "expected",
            "expected_alltoall_busbw_gbps": "expected", "AllreduceResult": "results", "CollectiveResult": "results",
            "Row": "results", "algbw_gbps": "results", "busbw_gbps": "results", "Transport": "transport",
            "TransportError": "transport", "parse_size": "sizes", "CollectiveOptions": "options"}
__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - a list, built once


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f"clockfabric.collective.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'clockfabric.collective' has no attribute {name!r}")
