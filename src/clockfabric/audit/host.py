"""The audit's host side: what one host reports, run on the host itself.

`python -m clockfabric.audit.host` reads a JSON spec on stdin and prints one JSON object: the host's facts
(clockfabric.audit.facts), the LLDP neighbour heard on each NIC, and pings to every rail
peer from each NIC. The three run at once, so a host answers in about the LLDP wait.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable

from clockfabric import lldp
from clockfabric.audit import facts, reach


def report(spec: dict) -> dict:
    nics = [n["name"] for n in spec.get("nics", [])]
    results: dict[str, object] = {}
    errors: dict[str, str] = {}

    def run(name: str, fn: Callable[[], object]) -> threading.Thread:
        def body() -> None:
            try:
                results[name] = fn()
            except Exception as e:  # noqa: BLE001 - one part failing must not lose the others
                errors[name] = f"{type(e).__name__}: {e}"

        t = threading.Thread(target=body, name=name)
        t.start()
        return t

    threads = [run("lldp", lambda: lldp.listen(nics, spec.get("lldp_wait_s", 1.5))),
               run("reach", lambda: reach.ping_mesh(spec.get("reach", {}), spec.get("sources", {}),
                                                    count=spec.get("pings", 5)))]
    out = facts.collect(spec)
    for t in threads:
        t.join()
    out.update(results)
    out.setdefault("errors", {}).update(errors)
    return out


def main() -> int:
    try:  # on stdin, not argv: a big fleet's spec outgrows one argument (128 KiB)
        spec = json.loads(sys.stdin.read())
        if not isinstance(spec, dict) or "host" not in spec:
            raise ValueError("the spec must be a JSON object with a host")
    except ValueError as e:
        print(f"clockfabric.audit.host: bad spec on stdin: {e}", file=sys.stderr)
        return 2
    json.dump(report(spec), sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
