"""One registry shape for every pluggable thing: audit checks, telemetry collectors, controller
detectors, agent services, collective schedulers, benchmarks.

Modelled on node_exporter's `registerCollector(name, default, factory)`: each entry has a stable
name, a factory, whether it is on by default, and whatever the kind needs to know about it
(`meta`). Each kind has one small ABC (`Collector`, `Check`, `Detector`, `Service`, ...) and
its factories make instances of it, so callers call typed methods, never one found by name.
Entries register themselves on import (one module each), so adding one is adding a file;
`load` names the package whose import registers them all.

    COLLECTORS = Registry("collector", load="clockfabric.telemetry.collectors")

    @COLLECTORS.register("nic", help="NIC counters from sysfs")
    def nic_collector(ctx: CollectorContext) -> Collector: ...

    for entry in COLLECTORS.enabled(enable=["rdma"], disable=["amd_gpu"]):
        collector = entry.factory(...)

A kind whose modules are costly to import may `declare` its entries instead (name, module, help
and meta, in the loading module): listing them imports none, and a module is imported, and its
factory registered as above, only when that entry is `get`. A factory is then called through a
stand-in until its module is loaded; `get` gives the factory itself.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from clockfabric.errors import ClockfabricError

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Entry(Generic[F]):
    name: str
    factory: F
    default: bool = True  # on unless disabled
    help: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


class _Deferred:
    """A declared entry's factory until its module is imported: calling it imports the module and
    calls the factory the module registered."""

    def __init__(self, registry: Registry, name: str):
        self._registry, self._name = registry, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._registry.get(self._name).factory(*args, **kwargs)


class Registry(Generic[F]):
    def __init__(self, kind: str, *, load: str | None = None):
        self.kind = kind  # "collector", "detector", ...: said in errors
        self._load = load
        self._entries: dict[str, Entry[F]] = {}
        self._declared: dict[str, str] = {}  # name -> the module that registers it, imported on `get`
        self._described: set[str] = set()  # names registered with their own default, help or meta

    def register(self, name: str, *, default: bool = True, help: str = "", **meta: Any) -> Callable[[F], F]:
        """Decorator: register the factory (a class or function) under `name`. A declared entry's
        module registers the factory alone: its default, help and meta are the declaration's."""
        def add(factory: F) -> F:
            entry = Entry(name, factory, default, help or (factory.__doc__ or "").strip().split("\n")[0], dict(meta))
            declared = self._entries.get(name)
            if declared is not None and not isinstance(declared.factory, _Deferred):
                raise ValueError(f"{self.kind} {name!r} registered twice")
            if help or meta or not default:
                self._described.add(name)
            self._entries[name] = self._agree(declared, entry) if declared is not None else entry
            return factory
        return add

    def declare(self, name: str, module: str, *, default: bool = True, help: str = "", **meta: Any) -> None:
        """An entry whose `module` registers its factory, imported only when the entry is `get`."""
        declared = Entry(name, cast(F, _Deferred(self, name)), default, help, dict(meta))
        if name in self._declared:
            raise ValueError(f"{self.kind} {name!r} declared twice")
        self._declared[name] = module
        registered = self._entries.get(name)  # its module was imported first (by a test, or a command)
        self._entries[name] = self._agree(declared, registered) if registered is not None else declared

    def _agree(self, declared: Entry[F], registered: Entry[F]) -> Entry[F]:
        """A declared entry as its module registered it: the module's factory, with the
        declaration's default, help and meta (said once, where the entry is declared)."""
        module = self._declared[declared.name]
        if registered.factory.__module__ != module:
            raise ValueError(f"{self.kind} {declared.name!r}: {registered.factory.__module__} registers it, "
                             f"declared as {module}'s")
        if declared.name in self._described:
            raise ValueError(f"{self.kind} {declared.name!r}: {module} gives its default, help or meta; a declared "
                             f"entry takes them from its declaration alone")
        return Entry(declared.name, registered.factory, declared.default, declared.help, declared.meta)

    def _loaded(self) -> dict[str, Entry[F]]:
        """Every entry, in the order the loading module imports (or declares) the modules that
        define them (not the order they happened to be imported in: a test or a command may
        import one first)."""
        if not self._load:
            return self._entries
        listed = [m.__name__ for m in vars(importlib.import_module(self._load)).values() if inspect.ismodule(m)]
        rank = {name: i for i, name in enumerate(listed + list(dict.fromkeys(self._declared.values())))}
        return dict(sorted(self._entries.items(), key=lambda kv: rank.get(self._module(kv[1]), len(rank))))

    def _module(self, entry: Entry[F]) -> str:
        return self._declared.get(entry.name) or entry.factory.__module__

    def names(self) -> list[str]:
        """In the loading module's order (registration order within one module)."""
        return list(self._loaded())

    def entries(self) -> list[Entry[F]]:
        return list(self._loaded().values())

    def get(self, name: str) -> Entry[F]:
        """The entry, its factory loaded (a declared entry's module imported)."""
        entries = self._loaded()
        if name not in entries:
            raise ClockfabricError(f"no {self.kind} named {name!r}; {self.kind}s are {', '.join(entries)}")
        if isinstance(entries[name].factory, _Deferred):
            importlib.import_module(self._declared[name])
            if isinstance(self._entries[name].factory, _Deferred):
                raise ValueError(f"{self._declared[name]} registers no {self.kind} {name!r}")
        return self._entries[name]

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
