"""Our own path-aware collective transport and an nccl-tests-style all-reduce benchmark.

    ring.py       the algorithms (ring, hierarchical) over `Links`: numpy buffers, no sockets
    transport.py  TCP subflows per peer pair, each pinned to a plane: the real `Links`
    worker.py     one rank on one host: connect, time, check, print JSON lines
    run.py        the launcher: allreduce(lab, hosts, ...) -> AllreduceResult
    expected.py   expected_busbw_gbps(): what link rates allow
    results.py    rows and nccl-tests' algbw / busbw formulas
    sizes.py      '64M' -> 67108864

Names below load on first use, so a worker (ring + transport) starts without the topology
and lab modules.
"""

from importlib import import_module

_EXPORTS = {"allreduce": "run", "expected_busbw_gbps": "expected", "AllreduceResult": "results", "Row": "results",
            "algbw_gbps": "results", "busbw_gbps": "results", "Transport": "transport",
            "TransportError": "transport", "parse_size": "sizes"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f"clockfabric.collective.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'clockfabric.collective' has no attribute {name!r}")
