"""The marking program: a tc classifier (cls_bpf, direct action) on a NIC's egress that sets the
DSCP of a job's packets by their socket, and the map of sockets it reads. Built here as eBPF
instructions and loaded with the bpf() system call: no compiler, no object file, no bpffs.

The map: key the socket's cookie (the identity sock_diag reports, workload.flows), value
[DSCP << 2, override, 6 pad bytes, packets marked (u64)]. The program, per packet:

    cookie = bpf_get_socket_cookie(skb); entry = map[cookie] or continue
    IPv4 only; tos = the IP header's second byte
    if the job marks its own DSCP (tos & 0xfc) and the entry does not override: continue
    tos = (tos & ECN) | entry.dscp, the header checksum patched (bpf_l3_csum_replace)
    entry.packets += 1 (atomically); continue

It always answers TC_ACT_UNSPEC: the packet goes on to the next classifier unchanged in fate.
"""

from __future__ import annotations

import ctypes
import os
import struct

_libc = ctypes.CDLL(None, use_errno=True)
SYS_BPF = {"x86_64": 321, "aarch64": 280}[os.uname().machine]
MAP_CREATE, MAP_LOOKUP, MAP_UPDATE, MAP_GET_NEXT_KEY, PROG_LOAD = 0, 1, 2, 4, 5
MAP_HASH, PROG_SCHED_CLS = 1, 3
KEY, VALUE = struct.Struct("=Q"), struct.Struct("=BB6xQ")
ETH_HLEN, IP_CSUM = 14, 10
(CALL_LOOKUP, CALL_STORE, CALL_CSUM, CALL_LOAD, CALL_COOKIE) = (1, 9, 10, 26, 46)
ACT_UNSPEC = -1
LICENSE = b"Dual MIT/GPL"  # the kernel's word for "may call every helper used here"


class BpfError(OSError):
    pass


def _bpf(cmd: int, attr: bytes) -> int:
    buf = ctypes.create_string_buffer(attr, 128)
    fd = _libc.syscall(SYS_BPF, cmd, buf, 128)
    if fd < 0:
        err = ctypes.get_errno()
        raise BpfError(err, f"bpf({cmd}): {os.strerror(err)}")
    return fd


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def program(map_fd: int) -> bytes:
    """The instructions, jumps resolved (labels 'out', 'set', 'count')."""
    mov_x, mov_k, add_k, and_k, or_x, rsh_k, lsh_k = 0xBF, 0xB7, 0x07, 0x57, 0x4F, 0x77, 0x67
    ldx_b, ldx_h, ldx_w, stx_h, stx_dw, xadd_dw = 0x71, 0x69, 0x61, 0x6B, 0x7B, 0xDB
    jeq_k, jne_k, jeq_x, call, exit_ = 0x15, 0x55, 0x1D, 0x85, 0x95
    code: list[tuple] = [
        (mov_x, 6, 1), (call, 0, 0, 0, CALL_COOKIE), (stx_dw, 10, 0, -8),
        ("map",), (mov_x, 2, 10), (add_k, 2, 0, 0, -8), (call, 0, 0, 0, CALL_LOOKUP),
        (jeq_k, 0, 0, "out", 0), (mov_x, 7, 0),
        (ldx_w, 2, 6, 16), (jne_k, 2, 0, "out", 0x0008),  # skb->protocol == htons(ETH_P_IP)
        (mov_x, 1, 6), (mov_k, 2, 0, 0, ETH_HLEN), (mov_x, 3, 10), (add_k, 3, 0, 0, -16), (mov_k, 4, 0, 0, 2),
        (call, 0, 0, 0, CALL_LOAD), (jne_k, 0, 0, "out", 0),
        (ldx_h, 8, 10, -16), (mov_x, 9, 8), (rsh_k, 9, 0, 0, 8),  # r8: the header's first word; r9: its tos
        (ldx_b, 1, 7, 1), (jne_k, 1, 0, "set", 0),
        (mov_x, 2, 9), (and_k, 2, 0, 0, 0xFC), (jne_k, 2, 0, "out", 0),  # the job's own DSCP stays
        ("set:",), (ldx_b, 3, 7, 0), (mov_x, 2, 9), (and_k, 2, 0, 0, 3), (or_x, 2, 3),
        (jeq_x, 2, 9, "count"),
        (lsh_k, 2, 0, 0, 8), (mov_x, 9, 8), (and_k, 9, 0, 0, 0xFF), (or_x, 9, 2), (stx_h, 10, 9, -24),
        (mov_x, 1, 6), (mov_k, 2, 0, 0, ETH_HLEN), (mov_x, 3, 10), (add_k, 3, 0, 0, -24), (mov_k, 4, 0, 0, 2),
        (mov_k, 5, 0, 0, 0), (call, 0, 0, 0, CALL_STORE), (jne_k, 0, 0, "out", 0),
        (mov_x, 1, 6), (mov_k, 2, 0, 0, ETH_HLEN + IP_CSUM), (mov_x, 3, 8), (mov_x, 4, 9), (mov_k, 5, 0, 0, 2),
        (call, 0, 0, 0, CALL_CSUM),
        ("count:",), (mov_k, 1, 0, 0, 1), (xadd_dw, 7, 1, 8),
        ("out:",), (mov_k, 0, 0, 0, ACT_UNSPEC), (exit_,),
    ]
    labels, at = {}, 0
    for item in code:
        if isinstance(item[0], str) and item[0].endswith(":"):
            labels[item[0][:-1]] = at
        else:
            at += 2 if item[0] == "map" else 1
    out, at = [], 0
    for item in code:
        if isinstance(item[0], str) and item[0].endswith(":"):
            continue
        if item[0] == "map":  # ld_imm64 r1 = the map (BPF_PSEUDO_MAP_FD)
            out += [_insn(0x18, 1, 1, 0, map_fd), _insn(0)]
            at += 2
            continue
        op, dst, src, off, imm = (*item, 0, 0, 0, 0)[:5]
        if isinstance(off, str):
            off = labels[off] - at - 1
        out.append(_insn(op, dst, src, off, imm))
        at += 1
    return b"".join(out)


class MarkMap:
    """A hash map of socket cookies to their marks, and the program that reads it."""

    def __init__(self, entries: dict[int, tuple[int, bool]]):
        # sized to what it holds: a map is made whole for each change and never grows after
        self.fd = _bpf(MAP_CREATE, struct.pack("=IIII", MAP_HASH, KEY.size, VALUE.size, max(1, len(entries))))
        self.prog_fd = -1
        try:
            for cookie, (dscp, override) in entries.items():
                self.put(cookie, dscp, override)
            self.prog_fd = self._load()
        except BaseException:
            self.close()
            raise

    def _load(self) -> int:
        insns = program(self.fd)
        code = ctypes.create_string_buffer(insns, len(insns))
        lic = ctypes.create_string_buffer(LICENSE)
        log = ctypes.create_string_buffer(65_536)
        attr = struct.pack("=IIQQIIQI", PROG_SCHED_CLS, len(insns) // 8, ctypes.addressof(code),
                           ctypes.addressof(lic), 1, len(log), ctypes.addressof(log), 0)
        try:
            return _bpf(PROG_LOAD, attr)
        except BpfError as e:
            raise BpfError(e.errno, f"the kernel refused the marking program: {e.strerror}; "
                                    f"{log.value.decode(errors='replace')[-300:]}") from None

    def put(self, cookie: int, dscp: int, override: bool) -> None:
        key, value = ctypes.create_string_buffer(KEY.pack(cookie)), ctypes.create_string_buffer(
            VALUE.pack(dscp << 2, int(override), 0))
        _bpf(MAP_UPDATE, struct.pack("=I4xQQQ", self.fd, ctypes.addressof(key), ctypes.addressof(value), 0))

    def packets(self) -> dict[int, int]:
        """Packets marked so far, by socket cookie."""
        out: dict[int, int] = {}
        cur, nxt = ctypes.create_string_buffer(KEY.size), ctypes.create_string_buffer(KEY.size)
        value = ctypes.create_string_buffer(VALUE.size)
        first = True
        while True:
            attr = struct.pack("=I4xQQ", self.fd, 0 if first else ctypes.addressof(cur), ctypes.addressof(nxt))
            try:
                _bpf(MAP_GET_NEXT_KEY, attr)
            except BpfError:
                return out  # ENOENT: the last key
            _bpf(MAP_LOOKUP, struct.pack("=I4xQQ", self.fd, ctypes.addressof(nxt), ctypes.addressof(value)))
            out[KEY.unpack(nxt.raw)[0]] = VALUE.unpack(value.raw)[2]
            ctypes.memmove(cur, nxt, KEY.size)
            first = False

    def close(self) -> None:
        for fd in (self.prog_fd, self.fd):
            if fd >= 0:
                os.close(fd)
        self.prog_fd = self.fd = -1
