"""What the agent needs of one attempt to run it: the job's spec as the attempt's start
read it, the chips, the lease, where its checkpoints are (AttemptSpec)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpuq import outputs, runfn
from tpuq.shapes import Seat

__all__ = ["AttemptSpec"]


@dataclass(frozen=True)
class AttemptSpec:
    """What the supervisor needs of the job and this attempt, read once at its start."""

    job_id: int
    attempt: int
    chips: tuple[int, ...]
    command: tuple[str, ...]
    cwd: str
    env: dict[str, str]
    stop_signal: str
    grace_s: float
    time_limit_s: float | None
    tcmalloc: bool
    resumed: bool
    owner: str = ""
    lease_until: float = 0.0  # keeper.clock(): measured before the lease was taken
    elapsed_s: float = 0.0  # how long it has run already (adopted from an earlier agent)
    gang: Seat | None = None  # a slice job's task: its worker's place in the slice
    checkpoint_dir: str | None = None  # as the scheduler recorded it (checkpoints.py)
    started_over: str | None = None  # why it starts without the job's earlier checkpoints
    output: str | None = None  # --output, its %j/%a expanded: written as its owner too
    session: bool = False  # interactive (`tpuq run`): it starts on its caller's terminal

    @property
    def worker(self) -> int | None:
        return None if self.gang is None else self.gang.worker

    @property
    def runs_function(self) -> bool:
        """A function job (tpuq.client.submit(fn)): its call is written before the
        start, its outcome stored after the end (attempts/functionjob.py)."""
        return runfn.is_function_command(self.command)

    @classmethod
    def of(cls, job: Any, job_id: int, attempt: int, **more: Any) -> AttemptSpec:
        """The attempt of a job row (or object) with attempts.RUN_COLUMNS; `more`: the
        chips, the lease and anything else the attempt adds. It resumes (TPUQ_RESUMED)
        unless it is the first, or starts over without the earlier checkpoints."""
        over = more.pop("started_over", getattr(job, "started_over", None))
        output = getattr(job, "output", None)
        if output:
            output = outputs.expand(output, job_id, getattr(job, "array_id", None),
                                    getattr(job, "array_index", None), job.owner,
                                    getattr(job, "name", None))
        return cls(job_id=job_id, attempt=attempt, command=tuple(job.command), cwd=job.cwd,
                   env=dict(job.env), stop_signal=job.stop_signal, grace_s=job.grace_s,
                   time_limit_s=job.time_limit_s, tcmalloc=job.tcmalloc,
                   resumed=attempt > 1 and not over, owner=job.owner,
                   checkpoint_dir=getattr(job, "checkpoint_dir", None), started_over=over,
                   output=output or None,
                   session=bool(getattr(job, "session", False)), **more)
