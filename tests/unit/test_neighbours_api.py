"""`GET /api/v1/neighbours` and discover over the real API: agents push their LLDP neighbours,
and the fleet file assembled from what the controller hands back is the fleet's."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from clockfabric.agent.push import neighbour_samples
from clockfabric.controller.app import create_app
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.monitor import Monitor
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.topology import multirail
from clockfabric.topology.discover import assemble, heard_from_samples
from tests.series import series_path, write
from tests.unit.credentials import as_host

TOKEN = "t" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(tmp_path):
    topo = multirail(4, 2, 2, 1)
    storage = SqliteStorage(tmp_path / "c.db")
    with series_path(tmp_path) as series:
        fleet = Fleet(storage, hosts=sorted(topo.hosts) + sorted(topo.switches), stale_s=60,
                      monitor=Monitor.create(storage, topology=topo), series=series)
        with TestClient(create_app(fleet, TOKEN, tick_s=3600)) as c:
            yield (c, series), topo
    storage.close()


def push(client, node: str, info: dict, heard: dict[str, str | None], *, wait: bool = False) -> None:
    """As the agent does: its info to the controller, its samples through the series gate."""
    client, series = client
    r = client.post("/api/v1/push", headers=as_host(TOKEN, node),
                    json={"host": node, "boot": "b", "info": info, "events": []})
    assert r.status_code == 200, r.text
    write(series, node, neighbour_samples(heard), wait=wait)


def test_pushed_neighbours_come_back_and_assemble_to_the_fleet(client):
    pair, topo = client
    client = pair[0]
    for node in topo.nodes():
        info = {"role": "switch"} if node in topo.switches else {"address": str(topo.hosts[node].address)}
        push(pair, node, info, {lk.port(node).iface: str(lk.other(node)) for lk in topo.links_of(node)})
    push(pair, "h0", {"address": str(topo.hosts["h0"].address)}, {"eth0": None, "eth1": "p1-leaf0:swp1"})
    push(pair, "h0", {"address": str(topo.hosts["h0"].address)}, {"eth0": "p0-leaf0:swp1", "eth1": "p1-leaf0:swp1"},
         wait=True)
    assert client.get("/api/v1/neighbours").status_code == 401
    rows = client.get("/api/v1/neighbours", headers=AUTH).json()["items"]
    h0_eth0 = [r for r in rows if r["host"] == "h0" and r["labels"]["device"] == "eth0"]
    assert [r["labels"]["neighbour"] for r in h0_eth0] == ["p0-leaf0:swp1", ""]  # newest first
    nodes = {h["host"]: h["info"] for h in client.get("/api/v1/hosts", headers=AUTH).json()["items"]}
    found = assemble(nodes, heard_from_samples(rows))
    assert found.hosts == topo.hosts and found.switches == topo.switches
    assert {frozenset((lk.a, lk.b)) for lk in found.links} == {frozenset((lk.a, lk.b)) for lk in topo.links}
