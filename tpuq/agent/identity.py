"""Whose account a job runs under (TPUQ_RUN_AS).

`agent` (the default): every job runs as the agent's own user, as a personal agent on
one's own VM should. `owner`: a root agent starts each job as the local account named
by the job's owner, as SLURM does, so files a job writes (its checkpoints, results in
the submitter's directory) belong to the submitter, and one person's job cannot touch
another's files or the agent's state.

The owner of a job submitted through a host's agent comes from the kernel
(SO_PEERCRED); one written to the database directly carries the name it was given
(TPUQ_USER or the login name): the database is trusted, as its credentials are.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from typing import Any


class NoAccount(LookupError):
    """The job's owner has no account on this host: the job cannot start here."""


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
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name}

    def give(self, path: str) -> None:
        """Make `path` (a file or directory tpuq made for the job) the job's own."""
        os.chown(path, self.uid, self.gid)


def account(owner: str) -> Account:
    try:
        pw = pwd.getpwnam(owner)
    except KeyError:
        raise NoAccount(f"no local account {owner!r} to run the job as "
                        "(TPUQ_RUN_AS=owner)") from None
    return Account(name=pw.pw_name, uid=pw.pw_uid, gid=pw.pw_gid,
                   groups=tuple(os.getgrouplist(pw.pw_name, pw.pw_gid)), home=pw.pw_dir)


def check_agent_can(run_as: str) -> str | None:
    """Why this agent process cannot run jobs as `run_as`, or None when it can."""
    if run_as == "owner" and os.geteuid() != 0:
        return ("TPUQ_RUN_AS=owner needs the agent to run as root: only root can start "
                "a job as another user")
    return None
