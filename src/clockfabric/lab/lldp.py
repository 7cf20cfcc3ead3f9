"""The lab's switches speak LLDP: every switch port announces "switch S, port P" like a real
switch does, so hosts can learn where each NIC is cabled. A thread in whichever process
needs it (the audit) holds a raw socket in every switch namespace and sends every interval."""

from __future__ import annotations

import socket
import threading

from clockfabric import lldp
from clockfabric.lab import netns
from clockfabric.lab.naming import link_alias
from clockfabric.lab.state import Lab


class Speaker(threading.Thread):
    def __init__(self, lab: Lab, interval_s: float = 0.5):
        super().__init__(name=f"lldp-{lab.name}", daemon=True)
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self.frames: list[tuple[socket.socket, bytes]] = []
        topo = lab.topology
        try:
            for lk in topo.links:
                for port in (lk.a, lk.b):
                    if port.node not in topo.switches:
                        continue
                    with netns.entered(lab.ns(port.node)):
                        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: sends, never receives
                    self.frames.append((s, b""))
                    s.bind((port.iface, 0))
                    mac = s.getsockname()[4]
                    self.frames[-1] = (s, lldp.frame(mac, port.node, port.iface, system=port.node,
                                                     description=link_alias(lab.name, lk.name)))
        except BaseException:
            self.close()
            raise

    def run(self) -> None:
        while True:
            for s, data in self.frames:
                try:
                    s.send(data)
                except OSError:
                    pass  # a port that is down sends nothing, as on a real switch
            if self.stopping.wait(self.interval_s):
                return

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(2)
        self.close()

    def close(self) -> None:
        for s, _ in self.frames:
            s.close()
        self.frames.clear()
