"""`--output PATH`: a file the job's output also goes to, as SLURM's `--output`.

The path may hold `%j` (the job id), `%a` (its array index), `%A` (its array's id),
`%u` (its owner), `%x` (its name) and `%%`. The job's keeper writes the file as the job's
owner (in owner mode the agent is root): `open_as` opens it in a child process that has
become the owner, walking the path one directory at a time, so the owner's own
permissions decide what may be written, and a symbolic link is followed only where
nobody but root or the owner could have put it. An existing file must be the owner's.
Stdlib only: the spec checks templates here, the keeper opens files here.
"""

from __future__ import annotations

import os
import re
import socket
import stat
from collections.abc import Sequence

_ESCAPE = re.compile(r"%(.)", re.DOTALL)
KNOWN = "jaAux%"
MAX_LINKS = 40  # symbolic links followed in one path (the kernel's own limit)


def template_error(path: str) -> str | None:
    """What is wrong with an --output path (None: an absolute path whose `%` escapes are
    known ones); the spec's validator says it as a SpecError."""
    if not path.startswith("/"):
        return f"--output {path!r} must be an absolute path"
    for m in _ESCAPE.finditer(path):
        if m.group(1) not in KNOWN:
            return (f"--output {path!r}: %{m.group(1)} is not one of %j (job id), "
                    "%a (array index), %A (array id), %u (owner), %x (name), %%")
    if re.search(r"(?<!%)(%%)*%\Z", path):
        return f"--output {path!r} ends with a lone %"
    if path.endswith("/"):
        return f"--output {path!r} names a directory; give a file name"
    return None


def expand(template: str, job_id: int, array_id: int | None, index: int | None,
           owner: str, name: str | None) -> str:
    """The file name of one job (`%a`, `%A` of a job outside an array: its id, 0)."""
    values = {"j": str(job_id), "a": str(index if index is not None else 0),
              "A": str(array_id if array_id is not None else job_id), "u": owner,
              "x": (name or "job").replace("/", "_"), "%": "%"}
    return _ESCAPE.sub(lambda m: values.get(m.group(1), m.group(0)), template)


class Refused(OSError):
    """The path cannot be written safely; the message says why."""


def open_as(path: str, uid: int | None, gid: int | None = None,
            groups: Sequence[int] = (), truncate: bool = True) -> int:
    """A descriptor open for appending to `path`, opened as `uid` (None: as this
    process). Refused or OSError with the reason."""
    if uid is None or uid == os.geteuid():
        return _open_walk(path, os.geteuid(), truncate)
    parent, child = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the child: become the owner, open, hand the descriptor back
        code = 1
        try:
            parent.close()
            os.setgroups(list(groups))
            os.setresgid(gid if gid is not None else uid, gid if gid is not None else uid,
                         gid if gid is not None else uid)
            os.setresuid(uid, uid, uid)
            try:
                fd = _open_walk(path, uid, truncate)
            except OSError as e:
                child.sendall(_reason(e).encode()[:4000])
            else:
                socket.send_fds(child, [b"ok"], [fd])
            code = 0
        finally:
            os._exit(code)
    child.close()
    try:
        msg, fds, _, _ = socket.recv_fds(parent, 4096, 1)
    finally:
        parent.close()
        os.waitpid(pid, 0)
    if fds and msg == b"ok":
        return fds[0]
    for fd in fds:
        os.close(fd)
    raise Refused(msg.decode(errors="replace") or "could not open it")


def _reason(e: OSError) -> str:
    return str(e) if isinstance(e, Refused) else (e.strerror or str(e))


def _open_walk(path: str, uid: int, truncate: bool) -> int:
    """Open `path` from `/` down, never following a link that someone other than root
    or `uid` could have made or swapped; an existing file must be `uid`'s and regular."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        raise Refused("no file name")
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    links = 0
    try:
        while parts:
            part = parts.pop(0)
            if part in (".", ""):
                continue
            last = not parts
            if last:
                new = _open_file(fd, part, uid, truncate)
                return new
            try:
                nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=fd)
            except OSError as e:
                st = _lstat(part, fd)
                if st is None or not stat.S_ISLNK(st.st_mode):
                    raise Refused(f"{part}: {e.strerror}") from None
                links += 1
                if links > MAX_LINKS:
                    raise Refused("too many symbolic links") from None
                _trust_link(fd, part, st, uid)
                target = os.readlink(part, dir_fd=fd)
                parts = [p for p in target.split("/") if p] + parts
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                continue
            os.close(fd)
            fd = nxt
        raise Refused("no file name")
    finally:
        os.close(fd)


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def _trust_link(dir_fd: int, name: str, st: os.stat_result, uid: int) -> None:
    """A link is followed only if it is root's or the owner's, in a directory that only
    they can change (so nobody else can swap it meanwhile)."""
    where = os.fstat(dir_fd)
    if st.st_uid not in (0, uid) or where.st_uid not in (0, uid) or \
            where.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise Refused(f"{name} is a symbolic link someone else could have made; "
                      "give the path it points to")


def _open_file(dir_fd: int, name: str, uid: int, truncate: bool) -> int:
    if name == "..":
        raise Refused("the file name is ..")
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | \
        os.O_CLOEXEC
    try:
        fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
    except OSError:
        st = _lstat(name, dir_fd)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise Refused(f"{name} is a symbolic link; give the file it points to") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
        os.close(fd)
        raise Refused(f"{name} is " + ("not a regular file" if not stat.S_ISREG(st.st_mode)
                                       else f"not the job owner's (uid {st.st_uid})"))
    os.set_blocking(fd, True)
    if truncate:
        os.ftruncate(fd, 0)
    return fd
