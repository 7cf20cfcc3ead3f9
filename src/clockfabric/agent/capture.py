"""The workload service's packet capture, following its NICs: a NIC that leaves the namespace (a
cable moved to another host, in the lab, or a NIC replaced) leaves its ring's socket bound to
nothing, deaf even once the NIC is back, and a read that fails (a NIC set down, a socket error)
would end the agent's loop, and with it every push to the controller. Either way the capture is
opened again on the NICs there now, with the same filter: samples are lost for a moment, not the
agent. (A NIC set down and up in place keeps its index: the kernel re-hooks the socket itself.)"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from clockfabric import lldp
from clockfabric.workload.capture import Capture
from clockfabric.workload.inband import Packet, PortBits

log = logging.getLogger(__name__)


class NicCapture:
    """A `Capture` of `nics`, opened again when one of them goes; `opener` makes one (tests give a fake)."""

    def __init__(self, nics: Sequence[str], opener: Callable[[list[str]], Capture] = Capture):
        self.nics = list(nics)
        self._open = opener
        self.capture = opener(self.nics)  # OSError: no raw sockets here, nothing to follow
        self.ports: PortBits | None = None  # the last filter asked for, put on a reopened capture too
        self.reopened = 0
        self._reopen = False  # a read failed, or the last reopening did

    @property
    def kept(self) -> int:
        return self.capture.kept

    def drain(self) -> list[tuple[Packet, str, int]]:
        if self._reopen or not self._bound():
            self._reopen_capture()
        try:
            return self.capture.drain()
        except OSError as e:
            self._failed(e)
            return []

    def dropped(self) -> int:
        try:
            return self.capture.dropped()
        except OSError as e:
            self._failed(e)
            return 0

    def only(self, ports: PortBits) -> None:
        self.ports = ports
        try:
            self.capture.only(ports)
        except OSError as e:
            self._failed(e)

    def _failed(self, e: OSError) -> None:
        log.warning("sampled packets on %s: %s; the capture is opened again", ", ".join(self.nics),
                    e.strerror or e)
        self._reopen = True

    def _bound(self) -> bool:
        socks = [ring.sock for ring in self.capture.rings]
        return len(socks) == len(self.nics) and all(lldp.bound(s, nic) for s, nic in zip(socks, self.nics, strict=True))

    def _reopen_capture(self) -> None:
        """A NIC not there yet is tried again at the next read; the old capture is kept till
        then, for what it can still hear."""
        try:
            new = self._open(self.nics)
        except OSError as e:
            if not self._reopen:
                log.warning("cannot open the packet capture on %s again (%s): trying at each read",
                            ", ".join(self.nics), e.strerror or e)
            self._reopen = True
            return
        if self.ports is not None:
            new.only(self.ports)  # attached to sockets just made: no NIC to have gone since
        new.kept = self.capture.kept
        self.capture.close()
        self.capture, self._reopen = new, False
        self.reopened += 1
        log.info("packet capture opened again on %s", ", ".join(self.nics))

    def close(self) -> None:
        self.capture.close()
