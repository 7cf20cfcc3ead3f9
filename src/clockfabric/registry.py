"""One registry shape for every pluggable thing: audit checks, telemetry collectors, controller
detectors, agent services, collective schedulers, benchmarks.

Modelled on node_exporter's `registerCollector(name, default, factory)`: each entry has a stable
name, a factory, whether it is on by default, and whatever the kind needs to know about it
(`meta`). Entries register themselves on import (one module each), so adding one is adding a
file; `load` names the package whose import registers them all.

    COLLECTORS = Registry("collector", load="clockfabric.telemetry.collectors")

    @COLLECTORS.register("nic", help="NIC counters from sysfs")
    class Nic: ...

    for entry in COLLECTORS.enabled(enable=["rdma"], disable=["amd_gpu"]):
        collector = entry.factory(...)
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from clockfabric.errors import ClockfabricError

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Entry(Generic[F]):
    name: str
    factory: F
    default: bool = True  # on unless disabled
    help: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


class Registry(Generic[F]):
    def __init__(self, kind: str, *, load: str | None = None):
        self.kind = kind  # "collector", "detector", ...: said in errors
        self._load = load
        self._entries: dict[str, Entry[F]] = {}

    def register(self, name: str, *, default: bool = True, help: str = "", **meta: Any) -> Callable[[F], F]:
        """Decorator: register the factory (a class or function) under `name`."""
        def add(factory: F) -> F:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._entries[name] = Entry(name, factory, default, help or (factory.__doc__ or "").strip().split("\n")[0],
                                        dict(meta))
            return factory
        return add

    def _loaded(self) -> dict[str, Entry[F]]:
        """Every entry, in the order the loading module imports the modules that define them (not
        the order they happened to be imported in: a test or a command may import one first)."""
        if not self._load:
            return self._entries
        listed = [m.__name__ for m in vars(importlib.import_module(self._load)).values() if inspect.ismodule(m)]
        rank = {name: i for i, name in enumerate(listed)}
        return dict(sorted(self._entries.items(), key=lambda kv: rank.get(kv[1].factory.__module__, len(rank))))

    def names(self) -> list[str]:
        """In the loading module's order (registration order within one module)."""
        return list(self._loaded())

    def entries(self) -> list[Entry[F]]:
        return list(self._loaded().values())

    def get(self, name: str) -> Entry[F]:
        entries = self._loaded()
        if name not in entries:
            raise ClockfabricError(f"no {self.kind} named {name!r}; {self.kind}s are {', '.join(entries)}")
        return entries[name]

    def __contains__(self, name: str) -> bool:
        return name in self._loaded()

    def enabled(self, enable: Iterable[str] = (), disable: Iterable[str] = ()) -> list[Entry[F]]:
        """The defaults, plus `enable`, less `disable`; an unknown name in either is an error."""
        enable, disable = set(enable), set(disable)
        for name in enable | disable:
            self.get(name)
        if both := enable & disable:
            raise ClockfabricError(f"{self.kind} {sorted(both)[0]!r} is both enabled and disabled; choose one")
        return [e for e in self.entries() if (e.default or e.name in enable) and e.name not in disable]
