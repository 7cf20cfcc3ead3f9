"""Can a given user read a file? Asked as that user where we may become it (root: a child that
takes the user's ids and opens the file, so ACLs, directories and groups all count), else from
the file's and its folders' modes, owners and groups."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

from clockfabric.errors import ClockfabricError


def user_ids(name: str) -> tuple[int, int, list[int]]:
    """The user's uid, primary gid and groups; one line for a user this host does not have."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ClockfabricError(f"--user {name}: no such user on this host; give the agent's service user "
                               "(systemd's DynamicUser has none: leave --user off and give the unit with --unit)"
                               ) from None
    return entry.pw_uid, entry.pw_gid, os.getgrouplist(name, entry.pw_gid)


def readable(path: Path, user: str | None) -> str | None:
    """None if `user` (None: this process) can read `path`; else why not, in a few words."""
    if user is None or pwd.getpwuid(os.geteuid()).pw_name == user:
        return _open_here(path)
    uid, gid, groups = user_ids(user)
    if os.geteuid() == 0:
        return _open_as(path, uid, gid, groups)
    return _by_modes(path, uid, groups)


def _open_here(path: Path) -> str | None:
    try:
        with open(path, "rb"):
            return None
    except OSError as e:
        return e.strerror or str(e)


def _open_as(path: Path, uid: int, gid: int, groups: list[int]) -> str | None:
    """Open the file in a child that has become the user (the parent keeps root)."""
    pid = os.fork()
    if pid == 0:  # the child: become the user, try, and say how it went in the exit code
        code = 0
        try:
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            with open(path, "rb"):
                pass
        except OSError as e:
            code = e.errno or 255
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else os.strerror(code)


def _by_modes(path: Path, uid: int, groups: list[int]) -> str | None:
    """The modes' answer, for a non-root doctor asked about another user (ACLs not counted)."""
    def may(st: os.stat_result, owner: int, group: int, other: int) -> bool:
        if st.st_uid == uid:
            return bool(st.st_mode & owner)
        if st.st_gid in groups:
            return bool(st.st_mode & group)
        return bool(st.st_mode & other)

    path = path.absolute()
    try:
        for folder in reversed(path.parents):
            if not may(folder.stat(), stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH):
                return f"Permission denied (cannot enter {folder})"
        st = path.stat()
    except OSError as e:
        return e.strerror or str(e)
    if may(st, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH):
        return None
    return "Permission denied"


def _name(lookup, ident: int) -> str:
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)


def describe(path: Path) -> str:
    """Mode and owner, as `ls -l` would show them, to say why a read was refused."""
    try:
        st = path.stat()
    except OSError:
        return "missing"
    owner, group = _name(pwd.getpwuid, st.st_uid), _name(grp.getgrgid, st.st_gid)
    return f"mode {stat.S_IMODE(st.st_mode):04o}, owner {owner}:{group}"
