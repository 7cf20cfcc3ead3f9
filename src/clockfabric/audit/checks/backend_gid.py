"""backend.gid: each RDMA NIC has a RoCE v2 GID for its IPv4 address, at the index the rest
of the fleet uses. NCCL_IB_GID_INDEX is set once for the whole job: a host whose RoCE v2 GID
sits at another index (or is missing) makes the job use RoCE v1 or fail to connect there."""

from __future__ import annotations

import ipaddress

from clockfabric.audit.context import Context
from clockfabric.audit.model import Finding, Verdict
from clockfabric.audit.registry import Outcome, check


def roce_v2_index(rdma: dict, ipv4: list[str]) -> int | None:
    """The GID table index of the RoCE v2 entry that carries one of the NIC's IPv4 addresses."""
    mapped = {int(ipaddress.IPv6Address(f"::ffff:{a.split('/')[0]}")) for a in ipv4}
    for g in rdma.get("gids", []):
        # sysfs writes a GID as eight 4-digit groups: a valid IPv6 literal
        if g.get("type", "").lower().replace(" ", "") == "rocev2" and int(ipaddress.IPv6Address(g["gid"])) in mapped:
            return g["index"]
    return None


@check("backend.gid", "RoCE v2 GID index",
       "Make sure the NIC's IPv4 address is configured (the GID follows it) and that NCCL_IB_GID_INDEX matches.")
def run(ctx: Context) -> Outcome:
    indexes: dict[tuple[str, str], int | None] = {}
    for h in ctx.reporting():
        for name, info in (ctx.facts(h, "nics") or {}).items():
            if info.get("rdma") and (h, name) not in ctx.broken:
                indexes[(h, name)] = roce_v2_index(info["rdma"], info.get("ipv4") or [])
    if not indexes:
        return Outcome("no RDMA NICs", [Finding(Verdict.SKIP, "no RDMA devices on any back-end NIC")])
    want, firm = ctx.expected("network", "gid_index", {f"{h}:{n}": i for (h, n), i in indexes.items()})
    findings = []
    for (h, n), i in sorted(indexes.items()):
        if i is None:
            findings.append(Finding(Verdict.FAIL, "no RoCE v2 GID for the NIC's IPv4 address", host=h, device=n))
        elif firm and i != want:
            findings.append(Finding(Verdict.FAIL, f"RoCE v2 GID at index {i}; the fleet uses {want}", host=h,
                                    device=n, evidence={"gid_index": i, "expected": want}))
    return Outcome(f"{len(indexes)} RDMA NICs, RoCE v2 GID index {want}", findings)
