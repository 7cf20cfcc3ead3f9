"""ptp4l's log lines and management replies as linuxptp 3.1.1 wrote and sent them in the lab
(free-running slaves, software timestamps; lines from several runs, some at debug level)."""

import pytest

from clockfabric.clock import ptp4l
from clockfabric.errors import ClockfabricError

SLAVE_LOG = """\
ptp4l[1825.843]: port 1: INITIALIZING to LISTENING on INIT_COMPLETE
ptp4l[1825.843]: port 0: INITIALIZING to LISTENING on INIT_COMPLETE
ptp4l[1826.732]: selected local clock 5a5aa1.fffe.d9eceb as best master
ptp4l[1826.854]: port 1: new foreign master 3a3a92.fffe.c58799-1
ptp4l[1827.354]: selected best master clock 3a3a92.fffe.c58799
ptp4l[1827.354]: foreign master not using PTP timescale
ptp4l[1827.354]: port 1: LISTENING to UNCALIBRATED on RS_SLAVE
ptp4l[1828.604]: master offset      -9336 s0 freq     -90 path delay     12140
ptp4l[1829.604]: master offset      -7879 s0 freq    +571 path delay     11254
ptp4l[1540.272]: delay   filtered       9519   raw       9519
ptp4l[1540.370]: peer/local    1.000000000
ptp4l[1740.844]: master offset      47501 s0 freq   +1302 path delay     19143
ptp4l[1559.690]: port 1: unicast request timeout
"""

# GET TIME_STATUS_NP answered by a slave (offset -4424 ns) and by the master (no GM but itself)
SLAVE_REPLY = bytes.fromhex(
    "0d020068000000000000000000000000000000005a5aa1fffed9eceb00000007047f0000"
    "00000000000000000000020000010034c000ffffffffffffeeb818ea58e026b9928b0000"
    "0000000000000000000000000000000000000000000000013a3a92fffec58799")
MASTER_REPLY = bytes.fromhex(
    "0d020068000000000000000000000000000000003a3a92fffec5879900000008047f0000"
    "00000000000000000000020000010034c000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000003a3a92fffec58799")


def test_offsets_from_a_real_slave_log():
    assert ptp4l.parse_offsets(SLAVE_LOG) == [(1828.604, -9336), (1829.604, -7879), (1740.844, 47501)]


def test_lines_without_an_offset_give_nothing():
    assert ptp4l.parse_offsets("ptp4l[1906.132]: ioctl SIOCETHTOOL failed: No such device\n"
                               "failed to create a clock\n") == []
    assert ptp4l.parse_offsets("") == []


def test_time_status_reply():
    assert ptp4l._time_status(SLAVE_REPLY) == (1795345121206178443, -4424, True)
    assert ptp4l._time_status(MASTER_REPLY) == (0, 0, False)


def test_what_is_not_a_time_status_reply_is_refused():
    assert ptp4l._time_status(SLAVE_REPLY[:60]) is None
    assert ptp4l._time_status(ptp4l._request(7)) is None  # our own GET, not a RESPONSE
    other_id = bytearray(SLAVE_REPLY)
    other_id[52:54] = b"\x20\x01"  # CURRENT_DATA_SET
    assert ptp4l._time_status(bytes(other_id)) is None


def test_request_is_a_local_management_get():
    req = ptp4l._request(7)
    assert len(req) == 54 and req[0] == 0x0D and req[2:4] == b"\x00\x36"
    assert req[44:47] == b"\x00\x00\x00"  # boundary hops 0 (never forwarded to the network), GET
    assert req[48:] == b"\x00\x01\x00\x02\xc0\x00"  # MANAGEMENT TLV, TIME_STATUS_NP


def test_missing_ptp4l_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(ptp4l.shutil, "which", lambda _: None)
    with pytest.raises(ClockfabricError, match="apt-get install linuxptp"):
        ptp4l.Ptp4lMesh(None, "h0", ["h1"], work_dir=tmp_path)
