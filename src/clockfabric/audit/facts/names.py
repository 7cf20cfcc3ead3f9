"""Name resolution facts: what each named host resolves to from here (IPv4).

getaddrinfo has no timeout of its own and a dead resolver holds it for many seconds, so names
resolve on a few daemon threads, started before the other readers run, and whatever has not
answered by the deadline is reported as such. Daemon threads: a stuck lookup never holds up
the process's exit.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable

TIMEOUT_S = 2.0
WORKERS = 8


class Lookup:
    """Resolution of `hosts`, under way from construction; result() waits until the deadline at most."""

    def __init__(self, hosts: Iterable[str], timeout: float = TIMEOUT_S, resolve: Callable = socket.getaddrinfo):
        self.hosts = list(dict.fromkeys(hosts))
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.resolve = resolve
        self.results: dict[str, dict] = {}
        self._todo = iter(self.hosts)
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._work, name=f"facts-names-{i}", daemon=True)
                         for i in range(min(WORKERS, len(self.hosts)))]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                host = next(self._todo, None)
            if host is None:
                return
            self.results[host] = self._one(host)

    def _one(self, host: str) -> dict:
        try:
            infos = self.resolve(host, None, socket.AF_INET, socket.SOCK_STREAM)
        except socket.gaierror as e:
            return {"error": e.strerror or str(e)}  # 'Name or service not known'
        except Exception as e:  # noqa: BLE001 - one odd name must not cost the others
            return {"error": f"{type(e).__name__}: {e}"}
        return {"addresses": list(dict.fromkeys(info[4][0] for info in infos))}

    def result(self) -> dict[str, dict]:
        for t in self._threads:
            t.join(max(0.0, self.deadline - time.monotonic()))
        late = {"error": f"no answer within {self.timeout:g} s"}
        return {h: self.results.get(h, late) for h in self.hosts}


def hosts_of(spec_names) -> list[str]:
    """The spec's names: a mapping name -> expected address, or a plain list of names."""
    if isinstance(spec_names, dict):
        return [str(h) for h in spec_names]
    if isinstance(spec_names, list):
        return [str(h) for h in spec_names]
    raise TypeError(f"names must be an object or a list, not {type(spec_names).__name__}")


def read(spec_names, timeout: float = TIMEOUT_S, resolve: Callable = socket.getaddrinfo) -> dict[str, dict]:
    return Lookup(hosts_of(spec_names), timeout, resolve).result()
