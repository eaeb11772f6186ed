"""Freeing a host's TPU on request (`tpuq pod clean`): who holds it, and what is left.

The same steps serve the agent (asked over its socket) and a host where no agent runs
(`tpuq pod clean --local`): find every process holding a TPU device file, kill those
the caller says are orphans of tpuq's attempts (only an agent knows which attempts are
its own and over), name everyone else, and remove a stale libtpu lock only when nobody
holds the devices any more. The lock is never removed while a holder lives: a new
inode would silently defeat libtpu's lock (tpu/libtpu.py). libtpu's log directory is
trimmed, not removed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tpuq.agent.tpu import devices, holders, libtpu
from tpuq.settings import Settings

# (orphans to kill, holders to leave alone with what they are: "job 3" or "foreign")
Classifier = Callable[[list[holders.ProcInfo]], tuple[list[holders.ProcInfo],
                                                       list[tuple[holders.ProcInfo, str]]]]


@dataclass
class CleanReport:
    """What a clean found and did on one host."""

    holders: list[dict[str, Any]] = field(default_factory=list)  # still holding the TPU
    jobs: list[str] = field(default_factory=list)  # the agent's running attempts
    killed: list[dict[str, Any]] = field(default_factory=list)  # orphans killed
    removed: list[str] = field(default_factory=list)  # stale lock files removed
    freed_bytes: int = 0  # libtpu logs trimmed
    complete: bool = True  # False: not every process's open files could be read

    @property
    def free(self) -> bool:
        return not self.holders and not self.jobs

    def as_dict(self) -> dict[str, Any]:
        return {"holders": self.holders, "jobs": self.jobs, "killed": self.killed,
                "removed": self.removed, "freed_bytes": self.freed_bytes,
                "complete": self.complete, "free": self.free}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CleanReport:
        return cls(holders=list(d.get("holders", [])), jobs=list(d.get("jobs", [])),
                   killed=list(d.get("killed", [])), removed=list(d.get("removed", [])),
                   freed_bytes=int(d.get("freed_bytes", 0)),
                   complete=bool(d.get("complete", True)))


def holder_dict(p: holders.ProcInfo, what: str) -> dict[str, Any]:
    return {"pid": p.pid, "user": p.user, "command": p.cmdline, "what": what}


def tpu_paths(settings: Settings) -> set[str]:
    """The host's TPU device files, resolved (what /proc/*/fd links point to)."""
    return devices.host_device_paths(devices.discover_chips(settings.device_glob))


def by_marker(found: list[holders.ProcInfo]) -> tuple[list[holders.ProcInfo],
                                                      list[tuple[holders.ProcInfo, str]]]:
    """With no agent to say which attempts are over: kill nothing; a process that tpuq
    started is named as such (its keeper may still run it, for the next agent)."""
    from tpuq import jobenv

    kept = []
    for p in found:
        job = p.environ_marker.get(jobenv.JOB_ID)
        kept.append((p, f"tpuq job {job} (no agent here)" if job else "foreign"))
    return [], kept


def free_tpu(settings: Settings, paths: set[str], classify: Classifier = by_marker,
             jobs: list[str] | None = None) -> CleanReport:
    """Kill the orphans `classify` names, report the other holders, and remove a stale
    libtpu lock and trim libtpu's logs once nobody holds the TPU. `jobs`: the agent's
    running attempts, which keep the lock whether or not they hold a device yet (a job
    between libtpu's open() and its lockf() holds nothing visible)."""
    report = CleanReport(jobs=list(jobs or ()), complete=os.geteuid() == 0)
    orphans, kept = classify(holders.find_holders(paths))
    if orphans:
        holders.kill_and_wait([(p.pid, p.start_ticks) for p in orphans],
                              timeout=settings.chip_release_s)
        report.killed = [holder_dict(p, "tpuq orphan") for p in orphans]
        _, kept = classify(holders.find_holders(paths))
    report.holders = [holder_dict(p, what) for p, what in kept]
    if report.free:
        report.removed = libtpu.clean_stale_lock(settings.libtpu_lockfile, holders_alive=False)
        report.freed_bytes = libtpu.trim_tpu_logs(settings.tpu_logs_dir)
    return report
