"""Kernel timestamps on UDP sockets (SO_TIMESTAMPING).

Software timestamps are taken by the kernel in the driver on send (after the qdisc, so a
host's own egress queue does not count as network delay) and on receive, in real time
(CLOCK_REALTIME). A NIC may also offer hardware timestamps; `capabilities()` says what an
interface offers so the agent can report what is in use.
"""

from __future__ import annotations

import array
import fcntl
import socket
import struct
from dataclasses import dataclass

SO_TIMESTAMPING = 37  # also the control message type, SCM_TIMESTAMPING
SOF_TX_HARDWARE = 1 << 0
SOF_TX_SOFTWARE = 1 << 1
SOF_RX_HARDWARE = 1 << 2
SOF_RX_SOFTWARE = 1 << 3
SOF_SOFTWARE = 1 << 4
SOF_RAW_HARDWARE = 1 << 6
SOF_OPT_ID = 1 << 7
SOF_OPT_TSONLY = 1 << 11
IP_RECVERR = 11
SO_EE_ORIGIN_TIMESTAMPING = 4
SIOCETHTOOL = 0x8946
ETHTOOL_GET_TS_INFO = 0x41

SOFTWARE_FLAGS = SOF_TX_SOFTWARE | SOF_RX_SOFTWARE | SOF_SOFTWARE | SOF_OPT_ID | SOF_OPT_TSONLY
# sendmsg ancillary data: no send timestamp for this datagram (it takes no OPT_ID id either)
NO_TX_TIMESTAMP = [(socket.SOL_SOCKET, SO_TIMESTAMPING, struct.pack("I", 0))]
_TIMESPECS = struct.Struct("=qqqqqq")  # struct scm_timestamping: ts[0] software, ts[2] raw hardware
_EXTENDED_ERR = struct.Struct("=IBBBBII")  # struct sock_extended_err
ANC_SIZE = 512


@dataclass(frozen=True)
class Capabilities:
    """What an interface can timestamp (ethtool -T)."""

    interface: str
    software: bool
    hardware: bool
    phc_index: int

    @property
    def mode(self) -> str:
        return "software" + (" (NIC hardware timestamps available)" if self.hardware else "")


def capabilities(interface: str) -> Capabilities:
    """Ask the driver (ETHTOOL_GET_TS_INFO) what timestamps `interface` supports."""
    buf = array.array("B", struct.pack("=IIi", ETHTOOL_GET_TS_INFO, 0, -1) + bytes(36))
    ifreq = struct.pack("16sP", interface.encode()[:15], buf.buffer_info()[0])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            fcntl.ioctl(s, SIOCETHTOOL, ifreq)
        except OSError:
            return Capabilities(interface, False, False, -1)
    _, flags, phc = struct.unpack_from("=IIi", buf)
    return Capabilities(interface, software=bool(flags & SOF_RX_SOFTWARE and flags & SOF_TX_SOFTWARE),
                        hardware=bool(flags & SOF_RAW_HARDWARE) and phc >= 0, phc_index=phc)


def enable(sock: socket.socket) -> None:
    """Software send and receive timestamps; send timestamps come back with an id and no payload."""
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, SOFTWARE_FLAGS)


def rx_timestamp(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    """The receive timestamp (ns, real time) in a recvmsg's control messages."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPING and len(data) >= _TIMESPECS.size:
            sec, nsec = _TIMESPECS.unpack_from(data)[:2]
            if sec or nsec:
                return sec * 1_000_000_000 + nsec
    return None


def tx_timestamp(ancdata: list[tuple[int, int, bytes]]) -> tuple[int, int] | None:
    """(send id, timestamp ns) from a message read off the error queue, or None."""
    stamp = key = None
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPING and len(data) >= _TIMESPECS.size:
            sec, nsec = _TIMESPECS.unpack_from(data)[:2]
            stamp = sec * 1_000_000_000 + nsec
        elif level == socket.SOL_IP and kind == IP_RECVERR and len(data) >= _EXTENDED_ERR.size:
            _, origin, _, _, _, _, data_ = _EXTENDED_ERR.unpack_from(data)
            if origin == SO_EE_ORIGIN_TIMESTAMPING:
                key = data_
    if stamp is None or key is None:
        return None
    return key, stamp
