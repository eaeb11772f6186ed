"""The job object: what `tpuq status --json` lists and `tpuq show --json` prints, one type.

The handlers build it (tpuq/api/views.py), the CLI, the dashboard and the Python API read
it: they share these TypedDicts, so a key is spelled once and mypy checks every read. The
contract for scripts is the table in docs/reference.md "The JSON contract"
(tests/unit/test_docs.py checks it names exactly these keys).

A TypedDict is the dict itself: the protocol's plain JSON object is cast to it (to_json
and from_json are `typing.cast`, free), nothing is copied or converted. The hot paths
(`status`, the handlers) import these types for the type checker only, so `tpuq status`
pays nothing for them. Times are epoch seconds, as the database keeps them. Stdlib only.
"""

from __future__ import annotations

from typing import Any, TypedDict


class JobObject(TypedDict):
    """Every job object has these keys (None where the job has no such value yet)."""

    id: int
    name: str | None  # --name; None: shown as its script's file name
    state: str  # a JobState value (tpuq/state/states.py)
    attempts: int  # attempts started so far
    host: str | None  # where it runs or last ran
    exit_code: int | None
    exit_signal: int | None
    command: list[str]
    cwd: str
    owner: str
    team: str
    chips: int | None  # None: the whole host
    tpu_type: str | None  # None: any type
    priority: int
    preemptions: int
    failures: int
    max_retries: int
    submitted_at: float
    ended_at: float | None
    reason: str | None  # why it last changed state
    waiting_for: str | None  # a queued job: what it waits for
    resubmit_of: int | None
    stop_signal: str
    grace_s: float
    time_limit_s: float | None
    stop_request: str | None  # a StopRequest value while a stop is under way
    notify: str | None
    array_id: int | None
    array_index: int | None
    env_dropped: list[str]  # TPU variables of the submitter's shell the job does not get
    started_at: float | None  # the latest attempt's (status)
    step: int | None  # its last reported checkpoint step (status)
    step_at: float | None
    total: int | None  # the step count it expects (status)
    eta_at: float | None  # when it should end, from its steps (status)
    checkpoint_dir: str | None
    checkpoint_host: str | None  # the host holding its checkpoints, if only that one can
    begin_at: float | None  # --begin: not started before this
    output: str | None  # --output: its template (%j, %a...)
    option_sources: dict[str, str]  # option -> "#TPUQ", "command line" or "environment"
    session: bool  # an interactive session (`tpuq run`)


class ListedJob(JobObject, total=False):
    """A job of `status --start`: when it should start, and its place in the queue;
    `tasks`: an array's waiting tasks the agent folded into this row (their indices)."""

    expected_start: float | None  # None: no estimate can be given (waiting_for says why)
    position: int  # 1 = the next the scheduler considers
    tasks: list[int]


class AttemptObject(TypedDict):
    number: int
    host: str
    chips: list[int]
    pid: int | None
    boot_id: str | None
    started_at: float | None
    ended_at: float | None
    outcome: str | None  # an Outcome value; None while it runs
    exit_code: int | None
    exit_signal: int | None
    reason: str | None
    log_path: str | None
    checkpoint_step: int | None
    checkpoint_at: float | None
    checkpoint_total: int | None
    eta_at: float | None
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
    at: float
    sent_at: float | None
    error: str | None
    detail: str | None


# "from" is a keyword: the functional form
EventObject = TypedDict("EventObject", {
    "at": float, "from": "str | None", "to": str, "attempt": int, "reason": "str | None",
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


