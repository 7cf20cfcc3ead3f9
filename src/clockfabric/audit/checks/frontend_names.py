"""frontend.names: every host resolves every fleet host's name to the address the fleet file
gives it. Launchers (torchrun, mpirun, NCCL's bootstrap) find ranks by name."""

from __future__ import annotations

from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check

SHOWN = 4


@check("frontend.names", "Name resolution of every fleet host",
       "Fix DNS or /etc/hosts on the hosts named so each fleet name resolves to its address.")
def run(ctx: Context) -> Outcome:
    hosts = [h for h in ctx.reporting() if isinstance(ctx.facts(h, "names"), dict)]
    if not hosts:
        return Outcome("no host reported name resolution", [Finding(Verdict.UNKNOWN, "no name facts")])
    want = {h: str(ctx.topology.hosts[h].address) for h in ctx.topology.hosts}
    bad: dict[str, dict[str, str]] = {}
    for h in hosts:
        for name, got in ctx.facts(h, "names").items():
            if name not in want:
                continue
            if "error" in got:
                bad.setdefault(h, {})[name] = f"unresolved ({got['error']})"
            elif want[name] not in got.get("addresses", []):
                bad.setdefault(h, {})[name] = f"-> {', '.join(got.get('addresses', [])) or 'nothing'}, not {want[name]}"
    if len(bad) == len(hosts) > 1 and len({frozenset(b) for b in bad.values()}) == 1:
        names = sorted(next(iter(bad.values())))
        return Outcome("no host resolves the fleet's names",
                       [Finding(Verdict.FAIL, f"no host resolves {_list(names)}", evidence=next(iter(bad.values())))])
    findings = [Finding(Verdict.FAIL, f"cannot resolve {_list(sorted(b))}", host=h, evidence=b)
                for h, b in sorted(bad.items())]
    return Outcome(f"{len(hosts)} hosts each resolved {len(want)} names", findings)


def _list(names: list[str]) -> str:
    return ", ".join(names[:SHOWN]) + (f" (+{len(names) - SHOWN} more)" if len(names) > SHOWN else "")
