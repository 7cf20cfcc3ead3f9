"""What the QoS service tells the other hosts each period (agent/services/qos.py `_tell`): its new
readings to the hosts that want them, its wants to every host, and only links the fleet can
name, so that a flow to an address outside the fleet never has a host refuse the message."""

from __future__ import annotations

from types import SimpleNamespace

from clockfabric.agent.services.qos import Qos
from clockfabric.qos.shared import Reading, SharedQueues, encode
from clockfabric.topology import interfaces, leafspine

T0 = 1_000_000_000_000


def qos_on_h0(tmp_path) -> tuple[Qos, dict[str, str], list[tuple[str, dict]]]:
    topo = leafspine(4, 2, 1, host_rate="100mbit")
    addresses = {i.port.node: str(i.address.ip) for i in interfaces(topo).values() if i.port.node in topo.hosts}
    sent: list[tuple[str, dict]] = []
    cfg = SimpleNamespace(topology=topo, host="h0", state_dir=tmp_path, window_s=2.0, qos_file=None)
    ctx = SimpleNamespace(cfg=cfg, rails=["eth0"], addresses=addresses, on_reply=[], on_link_change=[],
                          send=lambda host, msg: sent.append((host, msg)))
    return Qos(ctx), addresses, sent


def test_readings_go_to_their_readers_wants_to_every_host_and_only_fleet_links_go_out(tmp_path):
    svc, addr, sent = qos_on_h0(tmp_path)
    into_h1, outside = f">{addr['h1']}", ">192.0.2.7"
    readings = [Reading(into_h1, "critical", 0.004, 30e6, 0, T0), Reading(outside, "critical", 0.002, 5e6, 0, T0)]
    svc.pacer = SimpleNamespace(tell=lambda now_ns: readings, saying=readings,  # type: ignore[assignment]
                                wants=frozenset({f">{addr['h3']}", ">192.0.2.9"}))
    svc.shared.hear(encode("h2", T0, [], frozenset({into_h1})), addr["h2"], T0)  # h2 paces into h1
    svc._tell(T0, 0.0)
    assert sorted(host for host, _ in sent) == ["h1", "h2", "h3"]  # h2 its reader; all: h0's new wants
    msg = sent[0][1]
    assert [r[0] for r in msg["r"]] == [into_h1] and msg["w"] == [f">{addr['h3']}"]
    on_h2 = SharedQueues({"h0": addr["h0"]}, 6.0, svc.shared.links)
    assert on_h2.hear(msg, addr["h0"], T0) and not on_h2.refused  # every host can name all of it

    sent.clear()
    svc._tell(T0 + 10**8, 0.1)
    assert [host for host, _ in sent] == ["h2"]  # a new reading: its reader alone
    sent.clear()
    svc.pacer.tell = lambda now_ns: []  # type: ignore[attr-defined]
    svc._tell(T0 + 2 * 10**8, 0.2)
    assert sent == []  # nothing new, wants already said
