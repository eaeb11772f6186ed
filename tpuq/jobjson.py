"""The job object: what `tpuq status --json` lists and `tpuq show --json` prints, one type.

The handlers build it (tpuq/api/objects.py), the CLI, the dashboard and the Python API read
it: they share these TypedDicts, so a key is spelled once and mypy checks every read. The
contract for scripts is the table in docs/reference.md "The JSON contract"
(tests/unit/test_docs.py checks it names exactly these keys).

A TypedDict is the dict itself: the protocol's plain JSON object is cast to it, nothing
is copied. What the protocol carries is what scripts read, typed for them: times are ISO
8601 in UTC (`iso_time`, as `tpuq history --json` gives them), durations are written as
options take them (`spec.format_duration`: `1h30m`), names and chip counts are filled. A
reader that computes with a time turns it back with `epoch`. The Python API's
`Job.info()` returns this same object. Stdlib only: speaking it costs nothing.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, TypedDict

Time = str  # ISO 8601, UTC, to the second: 2026-11-26T15:04:05+00:00
Duration = str  # as options take it: 1h30m, 45s, 1d2h


def iso_time(t: float | None) -> Time | None:
    """Epoch seconds as the JSON contract writes a time (None stays None)."""
    if t is None:
        return None
    # datetime.isoformat(timespec="seconds") of UTC, in a third of its time: status
    # writes one or more for each of 10,000 jobs
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(t))


def epoch(t: Time | float | None) -> float | None:
    """A contract time (or epoch seconds already) as epoch seconds, to compute with."""
    if t is None or isinstance(t, (int, float)):
        return t
    return datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()


class JobObject(TypedDict):
    """Every job object has these keys (None where the job has no such value yet)."""

    id: int
    name: str  # its --name, else its script's (or command's) file name
    state: str  # a JobState value (tpuq/state/states.py)
    attempts: int  # attempts started so far
    host: str | None  # where it runs or last ran
    exit_code: int | None
    exit_signal: int | None
    command: list[str]
    cwd: str
    owner: str
    team: str
    chips: int | None  # a whole-host job: its latest attempt's host's (None: no host yet)
    whole_host: bool  # asked for the whole host
    tpu_type: str | None  # None: any type
    priority: int
    preemptions: int
    failures: int
    max_retries: int
    submitted_at: Time
    ended_at: Time | None
    reason: str | None  # why it last changed state
    waiting_for: str | None  # a queued job: what it waits for
    resubmit_of: int | None
    stop_signal: str
    grace: Duration
    time_limit: Duration | None
    stop_request: str | None  # a StopRequest value while a stop is under way
    notify: str | None
    array_id: int | None
    array_index: int | None
    env_dropped: list[str]  # TPU variables of the submitter's shell the job does not get
    started_at: Time | None  # the latest attempt's (status)
    step: int | None  # its last reported checkpoint step (status)
    step_at: Time | None
    total: int | None  # the step count it expects (status)
    eta_at: Time | None  # when it should end, from its steps (status)
    checkpoint_dir: str | None
    checkpoint_host: str | None  # the host holding its checkpoints, if only that one can
    begin_at: Time | None  # --begin: not started before this
    output: str | None  # --output: its template (%j, %a...)
    option_sources: dict[str, str]  # option -> "#TPUQ", "command line" or "environment"
    session: bool  # an interactive session (`tpuq run`)


class ListedJob(JobObject, total=False):
    """A job of `status --start`: when it should start, and its place in the queue;
    `tasks`: an array's waiting tasks the agent folded into this row (their indices)."""

    expected_start: Time | None  # None: no estimate can be given (waiting_for says why)
    position: int  # 1 = the next the scheduler considers
    tasks: list[int]


class AttemptObject(TypedDict):
    number: int
    host: str
    chips: list[int]
    pid: int | None
    boot_id: str | None
    started_at: Time | None
    ended_at: Time | None
    outcome: str | None  # an Outcome value; None while it runs
    exit_code: int | None
    exit_signal: int | None
    reason: str | None
    log_path: str | None
    checkpoint_step: int | None
    checkpoint_at: Time | None
    checkpoint_total: int | None
    eta_at: Time | None
    started_over: str | None


class WorkerObject(TypedDict):
    worker: int
    attempt: int
    host: str
    state: str
    pid: int | None
    outcome: str | None
    exit_code: int | None
    exit_signal: int | None
    reason: str | None


class NotificationObject(TypedDict):
    event: str  # the job's new state, or "preempted", "restarted"
    state: str  # pending, sent, failed, skipped
    tries: int
    at: Time
    sent_at: Time | None
    error: str | None
    detail: str | None


# "from" is a keyword: the functional form
EventObject = TypedDict("EventObject", {
    "at": Time, "from": "str | None", "to": str, "attempt": int, "reason": "str | None",
    "actor": "str | None"})


class _ShownJob(JobObject):
    env: dict[str, str]  # names and values; values "(hidden)" to anyone but owner and admins
    attempt_list: list[AttemptObject]
    events: list[EventObject]
    notifications: list[NotificationObject]
    logs_over_budget: list[dict[str, Any]]
    after: list[dict[str, Any]]  # what it waits for (arrays whole, tasks as ID_N, jobs)


class ShownJob(_ShownJob, total=False):
    """`tpuq show ID --json`: the job, with its attempts, events and messages."""

    worker_list: list[WorkerObject]  # a slice job: its current attempt's workers
    array_tasks: list[list[int]]  # `show` of an array's id: every task, [job id, index]


def keys_of(kind: type) -> frozenset[str]:
    """Every key a job object type may have (required or not)."""
    return frozenset(getattr(kind, "__required_keys__", frozenset())) | \
        frozenset(getattr(kind, "__optional_keys__", frozenset()))


