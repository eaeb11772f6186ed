"""Agents announce which TPUQ_HOME they serve, so that nobody on a shared VM queues into
a queue no agent serves without being told.

Each agent writes a small world-readable JSON note into `announce_dir` (/run/tpuq unless
configured; a root agent creates it, else an admin does once, mode 1777 like /tmp, and
an agent without the right to write there simply announces nothing) and removes it when
it stops. A client
whose own settings name no running agent reads the notes and says which TPUQ_HOME the
running agent serves. Anyone may write in a sticky shared directory, so a note is
hostile input: it is read small, checked field by field, shown with the account that
owns the file, and only while that agent's pid lives and its socket exists.

No privileges, no daemon: a file per agent, named for its socket.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpuq.settings import Settings

MAX_NOTE = 4096  # bytes read of one note
_FIELDS = {"home": str, "socket": str, "deployment": str, "host": str, "pid": int}
_SHOWN = re.compile(r"[^\x20-\x7e]")  # what a terminal is shown of a note: printable ASCII


def note_path(settings: Settings) -> Path:
    key = hashlib.sha256(os.path.realpath(settings.socket_path).encode()).hexdigest()[:16]
    return Path(settings.announce_dir) / f"agent-{key}.json"


def publish(settings: Settings) -> Path | None:
    """Write this agent's note; its path, or None where the directory is missing or not
    writable (the VM has none: nothing is announced)."""
    if not settings.announce_dir:
        return None
    path = note_path(settings)
    if os.geteuid() == 0 and not path.parent.exists():
        try:  # a root agent (a team VM's) makes it, as /tmp is: anyone's agent may note
            path.parent.mkdir(parents=True)
            os.chmod(path.parent, 0o1777)
        except OSError:
            return None
    note = {"home": settings.home, "socket": os.path.realpath(settings.socket_path),
            "deployment": settings.deployment, "host": settings.host, "pid": os.getpid()}
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(note, f)
        os.chmod(tmp, 0o644)  # whatever the umask: every user reads it
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return None
    return path


def withdraw(path: Path | None) -> None:
    """Remove this agent's note (only if it is still this process's)."""
    if path is None:
        return
    note = _read(path)
    if note is not None and note["pid"] == os.getpid():
        try:
            path.unlink()
        except OSError:
            pass


def others(settings: Settings, *, include_own: bool = False) -> list[dict[str, Any]]:
    """The notes of agents running on this VM (pid alive, socket present), each with the
    `account` owning its file; without `include_own`, only those serving another socket
    than these settings name."""
    if not settings.announce_dir:
        return []
    own = os.path.realpath(settings.socket_path)
    try:
        names = sorted(os.listdir(settings.announce_dir))
    except OSError:
        return []
    out = []
    for name in names[:256]:
        if not (name.startswith("agent-") and name.endswith(".json")):
            continue
        note = _read(Path(settings.announce_dir) / name)
        if note is None or not _alive(note) or (note["socket"] == own and not include_own):
            continue
        out.append(note)
    return out


def describe(note: dict[str, Any]) -> str:
    """One line about an announced agent, every field made printable."""
    home, dep = _clean(note["home"]), _clean(note["deployment"])
    return (f"pid {note['pid']} of {_clean(note['account'])} serves TPUQ_HOME={home} "
            f"({dep})")


def hint(settings: Settings) -> str | None:
    """What to tell someone whose settings name no running agent, when another runs on
    this VM: which TPUQ_HOME it serves. None when none runs."""
    found = others(settings)
    if not found:
        return None
    homes = sorted({_clean(n["home"]) for n in found})
    where = " or ".join(f"TPUQ_HOME={h}" for h in homes)
    return (f"no agent serves {settings.socket_path}, but an agent on this VM does "
            f"({'; '.join(describe(n) for n in found)}): set {where} to queue there")


def _read(path: Path) -> dict[str, Any] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        raw = os.read(fd, MAX_NOTE + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(raw) > MAX_NOTE:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(data, dict) or any(
            not isinstance(data.get(k), t) or isinstance(data.get(k), bool)
            for k, t in _FIELDS.items()):
        return None
    note = {k: data[k] for k in _FIELDS}
    note["account"] = _account(st.st_uid)
    return note


def _account(uid: int) -> str:
    from tpuq.users import name_of

    try:
        return name_of(uid)
    except (KeyError, OSError):
        return f"uid {uid}"


def _alive(note: dict[str, Any]) -> bool:
    pid = note["pid"]
    if not 0 < pid < 2**22:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    except OSError:
        return False
    try:
        return stat.S_ISSOCK(os.stat(note["socket"]).st_mode)
    except (OSError, ValueError):
        return False


def _clean(text: str) -> str:
    return _SHOWN.sub("?", text)[:300]
