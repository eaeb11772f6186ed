"""Job states, attempt outcomes, stop requests and the allowed transitions, written once.

The vocabulary every layer speaks, the CLI and the client included: stdlib only, so it
costs them nothing to import (tests/unit/test_layers.py keeps it so). Failure kinds are
tpuq/errors.py's.

What the user sees (JobState) is kept apart from how an attempt ended (Outcome): a job
preempted three times is still one job with four attempts, and preemptions are never
counted as failures.
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    QUEUED = "queued"
    HELD = "held"
    ASSIGNED = "assigned"  # a host owns it; the agent has not started the process yet
    RUNNING = "running"
    # a stop was requested (preempt, cancel, drain, time limit): signal sent, grace running
    PREEMPTING = "preempting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"

    def __str__(self) -> str:
        return self.value


QUEUED, HELD, ASSIGNED = JobState.QUEUED, JobState.HELD, JobState.ASSIGNED
RUNNING, PREEMPTING = JobState.RUNNING, JobState.PREEMPTING
SUCCEEDED, FAILED = JobState.SUCCEEDED, JobState.FAILED
CANCELLED, TIMEOUT = JobState.CANCELLED, JobState.TIMEOUT

TERMINAL: frozenset[JobState] = frozenset({SUCCEEDED, FAILED, CANCELLED, TIMEOUT})
ACTIVE: frozenset[JobState] = frozenset({ASSIGNED, RUNNING, PREEMPTING})  # holds chips
WAITING: frozenset[JobState] = frozenset({QUEUED, HELD})
OPEN: frozenset[JobState] = WAITING | ACTIVE  # not ended: what cancel and status look at
LIVE: frozenset[JobState] = frozenset({RUNNING, PREEMPTING})  # its process runs

# from -> allowed targets. Everything not listed is refused by state.transition().
ALLOWED: dict[JobState, frozenset[JobState]] = {
    QUEUED: frozenset({ASSIGNED, HELD, CANCELLED}),
    HELD: frozenset({QUEUED, CANCELLED}),
    # assigned -> queued: lease expired, host rebooted, or host busy with a foreign process
    ASSIGNED: frozenset({RUNNING, QUEUED, CANCELLED}),
    # running -> queued: requeue (exit 75, TPU busy, lease expired, reboot, retry with backoff)
    RUNNING: frozenset({SUCCEEDED, FAILED, CANCELLED, TIMEOUT, PREEMPTING, QUEUED}),
    # the job may finish on its own during the grace period; preempting -> preempting
    # records a different stop request (a cancel arriving during a preemption)
    PREEMPTING: frozenset({QUEUED, CANCELLED, TIMEOUT, SUCCEEDED, FAILED, PREEMPTING}),
    # terminal states are final: resubmit makes a new job linked to the old one
    SUCCEEDED: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
    TIMEOUT: frozenset(),
}


# What an owner may be told of (the outbox's `event`): a job's end (its new state), and
# these two, which are no state
EVENT_STARTED = "started"  # an attempt started running (`--notify start`)
EVENT_PREEMPTED = "preempted"  # queued again after a preemption
EVENT_RESTARTED = "restarted"  # starts over: its checkpoints are on a host it could not wait for


def in_order(states: frozenset[JobState]) -> tuple[str, ...]:
    """Their names in the order of the lifecycle (JobState's), for help texts and choices."""
    return tuple(st.value for st in JobState if st in states)


def allowed(frm: JobState, to: JobState) -> bool:
    return to in ALLOWED[frm]


class Outcome(str, Enum):
    """How one attempt ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"  # notice from the host, drain, `tpuq preempt`, reboot
    REQUEUED = "requeued"  # the job asked for it (exit 75)
    HOST_ERROR = "host_error"  # TPU busy / could not start: the host's fault, not the job's
    LOST = "lost"  # lease expired: the host stopped answering
    TIMEOUT = "timeout"

    def __str__(self) -> str:
        return self.value


# Outcomes that do not use up --max-retries and whose chip-hours are not charged.
NOT_CHARGED: frozenset[Outcome] = frozenset(
    {Outcome.PREEMPTED, Outcome.REQUEUED, Outcome.HOST_ERROR, Outcome.LOST}
)


class StopRequest(str, Enum):
    """Why a running job is being stopped; decides the state it ends in."""

    CANCEL = "cancel"
    PREEMPT = "preempt"
    TIMEOUT = "timeout"
    # one worker of a slice job ended or was lost: the others stop; how the attempt
    # counts is decided from the workers' ends (state/gangs.py), not from this request.
    # GANG: it ended asking to be run again (exit 75), with the others saving together:
    # they get the job's grace. BROKEN: it was lost or failed, and no collective (a save
    # included) can complete without it: they get TPUQ_GANG_STOP_S.
    GANG = "gang"
    BROKEN = "broken"

    def __str__(self) -> str:
        return self.value
