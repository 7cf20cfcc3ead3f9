"""The fleet keys: a file of `id:key` lines, reloaded when it changes, so keys rotate without a restart.

Each line is a key id (1..65535) and the key in hex (16 to 64 bytes), e.g.
`3:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08`; blank lines and lines
starting with `#` are skipped. Every listed key is accepted; the newest (the highest id) signs.
Rotating is adding a line with a higher id everywhere, then, once every host has it, removing
the old one.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from pathlib import Path

from clockfabric.errors import ClockfabricError

log = logging.getLogger(__name__)
MIN_KEY_BYTES, MAX_KEY_BYTES = 16, 64  # BLAKE2b takes keys up to 64 bytes
MAX_KEY_ID = 0xFFFF
CHECK_EVERY_S = 1.0  # how often the file's mtime is looked at: a stat per packet would cost more than the MAC
# the key this module's docstring shows: a file copied from the example seals nothing anyone could not forge
EXAMPLE_KEY = bytes.fromhex("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")


def parse(text: str, source: str = "key file") -> dict[int, bytes]:
    """Key id -> key; one clear line on anything malformed."""
    keys: dict[int, bytes] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        ident, sep, hexkey = line.partition(":")
        try:
            key_id, key = int(ident), bytes.fromhex(hexkey.strip())
        except ValueError:
            key_id, key = -1, b""
        if not sep or not 1 <= key_id <= MAX_KEY_ID or not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
            raise ClockfabricError(f"{source} line {n}: expected `id:hexkey` (id 1..{MAX_KEY_ID}, "
                                   f"{MIN_KEY_BYTES}..{MAX_KEY_BYTES} bytes of key in hex)")
        if key == EXAMPLE_KEY:
            raise ClockfabricError(f"{source} line {n}: this is the documentation's example key, which anyone can "
                                   "read: make the fleet's own with `clockfabric key new FILE`")
        if key_id in keys:
            raise ClockfabricError(f"{source} line {n}: key id {key_id} is listed twice")
        keys[key_id] = key
    if not keys:
        raise ClockfabricError(f"{source} lists no key")
    return keys


def new_key_file(path: Path, key_id: int = 1) -> Path:
    """A fresh random key in a file only its owner reads (a lab's, or a first fleet key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{key_id}:{secrets.token_hex(32)}\n")
    return path


class Keyring:
    """The keys every sealer signs and checks with; safe to share between threads (a reload
    swaps the whole table in one assignment)."""

    def __init__(self, keys: dict[int, bytes], path: Path | None = None):
        self.path = path
        self._table = (dict(keys), max(keys))  # (id -> key, the signing id): swapped whole on a reload
        self._mtime = 0.0
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: Path) -> Keyring:
        try:
            text, mtime = path.read_text(), path.stat().st_mtime
        except OSError as e:
            raise ClockfabricError(f"cannot read key file {path}: {e.strerror}") from None
        ring = cls(parse(text, str(path)), path)
        ring._mtime = mtime
        return ring

    def get(self, key_id: int) -> bytes | None:
        return self._table[0].get(key_id)

    def signer(self) -> tuple[int, bytes]:
        """The newest key: its id and the key."""
        keys, signing = self._table
        return signing, keys[signing]

    def ids(self) -> list[int]:
        return sorted(self._table[0])

    def maybe_reload(self) -> None:
        """Reload if the file changed since it was last looked at (at most once a second)."""
        now = time.monotonic()
        if self.path is None or now - self._checked < CHECK_EVERY_S:
            return
        self._checked = now
        try:
            changed = self.path.stat().st_mtime != self._mtime
        except OSError:
            return
        if changed:
            self.reload()

    def reload(self) -> bool:
        """Read the file again (on SIGHUP, or when it changed); a broken file keeps the keys we have."""
        if self.path is None:
            return False
        with self._lock:
            try:
                mtime = self.path.stat().st_mtime
                keys = parse(self.path.read_text(), str(self.path))
            except (OSError, ClockfabricError) as e:
                log.warning("keeping the current keys: %s", e)
                return False
            self._mtime = mtime
            self._table = (keys, max(keys))
        log.info("fleet keys reloaded from %s: ids %s, signing with %d", self.path, sorted(keys), max(keys))
        return True
