"""Whose account a job runs under (TPUQ_RUN_AS).

`agent` (the default): every job runs as the agent's own user, as a personal agent on
one's own VM should. `owner`: a root agent starts each job as the local account named
by the job's owner, as SLURM does, so files a job writes (its checkpoints, results in
the submitter's directory) belong to the submitter, and a job runs with its owner's
file permissions, never root's.

Who the owner is: for a submit through a host's agent, the kernel says (SO_PEERCRED);
for a job written to the database directly, whatever name the writer gave. So this is
a guard among colleagues, not against someone holding the database's credentials:
they can name any owner but root, whom owner mode never runs a job as.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tpuq import jobenv
from tpuq.errors import Failure, TpuqError

ENV_BIN = shutil.which("env") or "/usr/bin/env"


class NoAccount(TpuqError, LookupError):
    """The job's owner has no account on this host (or is root): it cannot start here."""

    KIND = Failure.NOT_FOUND


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    def popen_kwargs(self) -> dict[str, Any]:
        """subprocess.Popen arguments that drop to this account after the fork (the
        child sets its groups, gid, then uid before it execs the job)."""
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}

    def env(self) -> dict[str, str]:
        """What a login as this account would set; the agent's own would mislead."""
        return jobenv.account_env(self.name, self.home)

    def give(self, path: str) -> None:
        """Make `path` (a file or directory tpuq made for the job) the job's own. Never
        through a symlink; the directories it lies in are root's alone (private_dir)."""
        os.chown(path, self.uid, self.gid, follow_symlinks=False)


def account(owner: str, min_uid: int) -> Account:
    """The account a job of `owner` runs as: never root, never a system account."""
    try:
        pw = pwd.getpwnam(owner)
    except KeyError:
        raise NoAccount(f"no local account {owner!r} to run the job as "
                        "(TPUQ_RUN_AS=owner)") from None
    if pw.pw_uid == 0:
        raise NoAccount(f"owner {owner!r} is root, and TPUQ_RUN_AS=owner runs no job as root")
    if pw.pw_uid < min_uid:
        raise NoAccount(f"owner {owner!r} is a system account (uid {pw.pw_uid} < "
                        f"TPUQ_RUN_AS_MIN_UID {min_uid}): TPUQ_RUN_AS=owner runs no job as one")
    return Account(name=pw.pw_name, uid=pw.pw_uid, gid=pw.pw_gid,
                   groups=tuple(os.getgrouplist(pw.pw_name, pw.pw_gid)), home=pw.pw_dir)


def in_dir(cwd: str, command: Sequence[str]) -> list[str]:
    """`command`, entering `cwd` only once it runs as its owner.

    Popen's own cwd= changes directory in the child before it drops privileges, that
    is as root: a job could then start inside a directory its owner may not enter and
    read it through relative paths. `env -C` changes directory after the drop, then
    execs the command in place (same pid, same process group).
    """
    return [ENV_BIN, "-C", cwd, "--", *command]


def private_dir(path: str) -> str | None:
    """Why `path` is not safe for the agent to hand files out of, or None when it is:
    a real directory of the agent's own that nobody else may write into (else someone
    could put a symlink where the agent makes a job's checkpoint dir, and be handed
    whatever it points to). Made, mode 0755, if missing."""
    os.makedirs(path, mode=0o755, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return (f"{path} must be owned by the agent's user and writable by nobody else "
                f"(it is uid {st.st_uid}, mode {stat.filemode(st.st_mode)})")
    return None


def check_agent_can(run_as: str, private_dirs: Sequence[str] = ()) -> str | None:
    """Why this agent process cannot run jobs as `run_as`, or None when it can."""
    if run_as != "owner":
        return None
    if os.geteuid() != 0:
        return ("TPUQ_RUN_AS=owner needs the agent to run as root: only root can start "
                "a job as another user")
    if subprocess.run([ENV_BIN, "-C", "/", ENV_BIN], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL, env=jobenv.helper_env(os.environ),
                      check=False).returncode != 0:
        return f"TPUQ_RUN_AS=owner needs an `env` that takes -C (coreutils 8.28+): {ENV_BIN}"
    for path in private_dirs:
        why = private_dir(path)
        if why:
            return f"TPUQ_RUN_AS=owner: {why}"
    return None
