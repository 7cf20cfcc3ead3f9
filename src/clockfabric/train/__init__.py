"""Stateful fault tolerance: spares that take a failed rank's place, its state from peers' memory.

`launch` (the coordinator: ranks and spares on lab hosts, failure detection, replacement)
needs no torch; `elastic` (the training loop's wrapper, in each rank) is imported on first use.
"""

from __future__ import annotations

from typing import Any


def elastic(*args: Any, **kwargs: Any) -> Any:
    from clockfabric.train.elastic import elastic as wrap

    return wrap(*args, **kwargs)
