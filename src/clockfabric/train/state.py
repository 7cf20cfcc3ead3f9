"""A rank's full training state, captured in memory, carried as bytes, restored bit-equal.

The state is what a replacement rank needs to take the next step as the failed one would
have: the module's parameters and buffers, the optimizer's state, the random generators
(torch, Python's `random`, NumPy's where present), the data loader's position and the step.
"""

from __future__ import annotations

import copy
import hashlib
import io
import random
from typing import Any, Protocol

import torch

try:  # NumPy's generator is carried where NumPy is installed
    import numpy as np
except ImportError:  # pragma: no cover - NumPy ships with torch's usual installs
    np = None  # type: ignore[assignment]


class Stateful(Protocol):
    """What holds optimizer state: an optimizer, or ZeRO-1's shard with its mirror (train.zero)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def capture(module: torch.nn.Module, optimizer: Stateful | None, step: int,
            position: int) -> dict[str, Any]:
    """The state as it is now (tensors shared with the live objects: copy it to keep it).
    optimizer None: a sharded optimizer's state, which travels apart (train.zero)."""
    return {
        "module": module.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                "numpy": np.random.get_state() if np is not None else None},
        "position": position,
        "step": step,
    }


def snapshot(module: torch.nn.Module, optimizer: Stateful, step: int,
             position: int, into: dict[str, Any] | None = None) -> dict[str, Any]:
    """A private copy of the state: what the step in flight is undone to if it fails.

    `into`, an earlier snapshot no longer wanted, lends its tensors: each is copied into where
    its shape and dtype still fit, so a step's snapshot allocates nothing once the optimizer's
    state exists. Nothing live ever holds a snapshot's tensors (restore copies out of them)."""
    return _copy(capture(module, optimizer, step, position), into)


def _copy(value: Any, into: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if isinstance(into, torch.Tensor) and into.shape == value.shape and into.dtype == value.dtype \
                and into.device == value.device:
            return into.copy_(value)
        return value.detach().clone()
    if isinstance(value, dict):
        lent = into if isinstance(into, dict) else {}
        return {k: _copy(v, lent.get(k)) for k, v in value.items()}
    if type(value) in (list, tuple):  # a named tuple is copied whole, below
        items = into if type(into) is type(value) and len(into) == len(value) else [None] * len(value)
        return type(value)(_copy(v, w) for v, w in zip(value, items, strict=True))
    return copy.deepcopy(value)  # numbers, strings and NumPy's generator state: small


def restore(state: dict[str, Any], module: torch.nn.Module,
            optimizer: Stateful | None) -> tuple[int, int]:
    """Load the state into the live objects; returns (step, position)."""
    module.load_state_dict(state["module"])  # copied into the parameters and buffers
    if optimizer is not None and state["optimizer"] is not None:
        # a copy: the optimizer keeps the tensors it is given, and a snapshot's are lent again
        optimizer.load_state_dict(_copy(state["optimizer"], None))
    rng = state["rng"]
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    if np is not None and rng["numpy"] is not None:
        np.random.set_state(rng["numpy"])
    return int(state["step"]), int(state["position"])


def to_bytes(state: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def from_bytes(data: bytes) -> dict[str, Any]:
    # weights_only=False: the state holds Python's RNG tuple and NumPy's state, not just tensors;
    # the bytes come from a peer rank of the same job, never from outside it
    return torch.load(io.BytesIO(data), weights_only=False)


def digest(module: torch.nn.Module) -> str:
    """SHA-256 over the module's state dict, name by name: equal only if every bit is."""
    h = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()
