"""Where a job's checkpoints live: one rule, used by the scheduler (which records it with
each assignment) and by the agents (which make the directory and tell the job).

A job's checkpoint directory is a function of the deployment's checkpoint root, the
database's instance id and the job id (and, when the directory is host-local, of the
host's TPUQ_HOME and the attempt that first used it there):

- a shared root (an NFS mount every host has at the same path, or a `gs://` bucket
  URL): `<root>/<instance>/<job>`, the same for every attempt on every host;
- no root (the default): `<home>/checkpoints/<instance>/<job>` on the host that ran it,
  reachable from that host only. An attempt that must start elsewhere starts over, in a
  directory of its own on its new host (`<job>.<attempt>`): never in one an earlier stay
  of the job on that host left behind.

Pure, standard library only (and tpuq.records): the scheduler's pass and the settings check import it.
"""

from __future__ import annotations

import os
import posixpath

from tpuq.records import Record

URL_SCHEMES = ("gs://",)  # roots passed through as is: Orbax and TensorStore write them


class Placement(Record, frozen=True):
    """Where an attempt keeps its checkpoints, as the scheduler records it."""

    dir: str
    host: str | None  # the host (a slice job's: slice) whose disk holds it; None: shared
    started_over: str | None  # why it starts without the job's earlier checkpoints
    fresh: bool  # another directory than the job's last: nothing seen in it yet


def is_url(path: str) -> bool:
    return path.startswith(URL_SCHEMES)


def check_root(root: str) -> str | None:
    """Why `root` cannot be a checkpoint root, in words, or None when it can."""
    if not root:
        return None
    if is_url(root):
        bucket = root.split("://", 1)[1].split("/", 1)[0]
        return None if bucket else f"{root!r} names no bucket (gs://BUCKET/PREFIX)"
    if "://" in root:
        return (f"{root!r}: only a path (a shared mount, e.g. NFS) or a gs:// URL can be "
                "a checkpoint root")
    if not os.path.isabs(root):
        return f"{root!r} is not an absolute path"
    return None


def local_root(home: str) -> str:
    """Where host-local checkpoints live under a TPUQ_HOME."""
    return os.path.join(home, "checkpoints")


def base(root: str | None, home: str, instance: str) -> str:
    """The directory above every job's of this database on a host with `root`/`home`."""
    tag = instance[:12] or "unknown"
    if root:
        joined = posixpath.join if is_url(root) else os.path.join
        return joined(root.rstrip("/") if is_url(root) else root, tag)
    return os.path.join(local_root(home), tag)


def job_dir(root: str | None, home: str, instance: str, job_id: int,
            since_attempt: int | None = None) -> str:
    """The job's directory; `since_attempt`: a host-local one first used by that attempt
    after the job had to leave its checkpoints on another host."""
    name = str(job_id) if since_attempt is None or root else f"{job_id}.{since_attempt}"
    joined = posixpath.join if root and is_url(root) else os.path.join
    return joined(base(root, home, instance), name)


def placed(root: str | None, home: str, instance: str, job_id: int, attempt: int,
           host: str, before: tuple[str | None, str | None, bool]) -> Placement:
    """Where attempt `attempt` of a job on `host` keeps its checkpoints, given where the
    job's were (`before`: (dir, host, whether anything was seen in it); (None, None,
    False) for a first attempt). It starts over, and says so, when it cannot reach a
    directory that held something."""
    old_dir, old_host, seen = before
    holder = None if root else host
    if old_dir is None:
        return Placement(job_dir(root, home, instance, job_id), holder, None, True)
    if root:
        new = job_dir(root, home, instance, job_id)
        if new == old_dir:
            return Placement(new, None, None, False)
    elif old_host == host:
        return Placement(old_dir, host, None, False)
    else:
        new = job_dir(root, home, instance, job_id, attempt)
    where = f"on {old_host}" if old_host else f"in {old_dir}"
    over = f"checkpoint {where} not reachable from {host}: starting over" if seen else None
    return Placement(new, holder, over, True)


def has_content(path: str) -> bool:
    """Whether a local checkpoint directory holds anything (one entry is enough)."""
    try:
        with os.scandir(path) as entries:
            return next(entries, None) is not None
    except OSError:
        return False
