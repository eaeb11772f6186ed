"""One attempt's life under its supervisor (agent/attempts/supervisor.py), with a fake
keeper: what the supervisor tells the keeper and what it records in the database.

The keeper here is this process (FakeKeeper): the supervisor's real KeeperLink talks to
it over a socket pair, every message in its wire form (keeper/messages.py). The job's
process is a real `sleep`, so a keeper that goes away leaves a process to be killed.
Every wait is on a condition with a deadline, never a sleep. The whole agent, with real
keepers, is tested in tests/e2e (test_embedded_queue.py, test_preemption.py, ...).
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select

from tpuq.agent.attempts import outcome
from tpuq.agent.attempts.spec import AttemptSpec
from tpuq.agent.attempts.supervisor import Supervisor
from tpuq.agent.keeper.link import KeeperLink, clock
from tpuq.agent.keeper.messages import (
    Collected,
    Ended,
    FromKeeper,
    Kill,
    Launch,
    Lease,
    Started,
    Stop,
    ToKeeper,
    encode,
    to_keeper,
)
from tpuq.agent.local.terminals import Terminals
from tpuq.agent.tpu.holders import proc_start_ticks
from tpuq.settings import Settings
from tpuq.spec import JobSpec
from tpuq.state import attempts, jobs
from tpuq.state.attempts import Ending
from tpuq.state.db import Database
from tpuq.state.models import Attempt, Job
from tpuq.state.states import Outcome, StopRequest

HOST = "h0"
# long enough that no renewal falls due by the clock during a test: each one here is
# asked for (Supervisor.notify), so the messages sent are exactly those asserted
LEASE_S = 300.0
WAIT_S = 20.0


class FakeKeeper:
    """The keeper server and the one keeper it forks (link.Keepers), in this process.
    It answers the launch with Started (the job's process) and otherwise says only what
    the test tells it to (`says`); it records every message the supervisor sent."""

    def __init__(self, run_dir: str, pid: int) -> None:
        self.run_dir = run_dir
        self.pid = pid
        self.launched: list[Launch] = []
        self.received: list[ToKeeper] = []
        self.hung_up = False  # the supervisor closed its link
        self.ends_at_once: Ended | None = None  # said right after Started (a short job)
        self._cond = threading.Condition()
        self._sock: socket.socket | None = None

    # ---- link.Keepers ---------------------------------------------------------------
    def launch(self, launch: Launch, tty: int | None = None) -> tuple[KeeperLink, FromKeeper]:
        assert tty is None, "no session here"
        ours, theirs = socket.socketpair()
        reader = threading.Thread(target=self._read, args=(ours,), daemon=True)
        reader.start()
        with self._cond:
            self._sock = ours
            self.launched.append(launch)
            self._cond.notify_all()
        if self.ends_at_once is not None:
            ours.sendall(encode(self.ends_at_once))
        return KeeperLink(theirs), Started(pid=self.pid, keeper_pid=os.getpid(),
                                           start_ticks=proc_start_ticks(self.pid))

    # ---- the keeper's side ----------------------------------------------------------
    def _read(self, sock: socket.socket) -> None:
        with sock.makefile("rb") as lines:
            for line in lines:
                msg = to_keeper(line)
                with self._cond:
                    self.received.append(msg)
                    self._cond.notify_all()
        with self._cond:
            self.hung_up = True
            self._cond.notify_all()

    def wait_for(self, what: Callable[[], Any], why: str) -> None:
        with self._cond:
            assert self._cond.wait_for(what, WAIT_S), f"no {why} within {WAIT_S:g}s"

    def wait_launched(self) -> None:
        self.wait_for(lambda: self.launched, "launch")

    def wait_received(self, kind: type[ToKeeper]) -> None:
        self.wait_for(lambda: any(isinstance(m, kind) for m in self.received),
                      kind.__name__)

    def says(self, msg: FromKeeper) -> None:
        assert self._sock is not None
        self._sock.sendall(encode(msg))

    def dies(self) -> None:
        """The keeper is killed (OOM, kill -9): its socket closes, mid-run."""
        assert self._sock is not None
        self._sock.shutdown(socket.SHUT_RDWR)

    def sent(self) -> list[ToKeeper]:
        """Everything the supervisor sent, once it hung up (its link closed)."""
        self.wait_for(lambda: self.hung_up, "hang-up")
        return list(self.received)


class Host:
    """The HostContext a supervisor runs in (the Executor's part of it), without a TPU."""

    def __init__(self, db: Database, tmp: Path, keepers: FakeKeeper) -> None:
        self.settings = Settings(home=str(tmp), lease_s=LEASE_S, retry_backoff_s=0.0,
                                 chip_release_s=WAIT_S)
        self.db = db
        self.name = HOST
        self.keepers = keepers
        self.terminals = Terminals()
        self.instance = "test-instance"
        self.done = threading.Event()
        self._tmp = tmp

    def log_path(self, job_id: int, attempt: int, worker: int | None = None) -> str:
        return str(self._tmp / "logs" / f"{job_id}-{attempt}.log")

    def checkpoint_dir(self, spec: AttemptSpec) -> str:
        return str(self._tmp / "checkpoints" / str(spec.job_id))

    def prepare_dirs(self, spec: AttemptSpec) -> None:
        os.makedirs(self._tmp / "logs", exist_ok=True)

    def attempt_env(self, spec: AttemptSpec, progress_path: str) -> dict[str, str]:
        return {"TPUQ_PROGRESS_FILE": progress_path}

    def chip_lock_paths(self, chips: tuple[int, ...]) -> list[str]:
        return []

    def attempt_done(self, sup: Supervisor) -> None:
        self.done.set()

    def tpu_busy(self, message: str, chips: tuple[int, ...]) -> str | None:
        return None

    def platform_notice(self) -> str | None:
        return None


@pytest.fixture
def job_process() -> Iterator[subprocess.Popen[bytes]]:
    """The job's process, as its keeper would have started it."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.fixture
def keeper(tmp_path: Path, job_process: subprocess.Popen[bytes]) -> FakeKeeper:
    return FakeKeeper(str(tmp_path / "run"), job_process.pid)


@pytest.fixture
def host(db: Database, tmp_path: Path, keeper: FakeKeeper) -> Host:
    return Host(db, tmp_path, keeper)


def supervise(host: Host, **job: Any) -> tuple[Supervisor, int]:
    """A job submitted, assigned here and started (as Executor.start_attempt starts
    it), its supervisor running and its keeper launched."""
    with host.db.write() as s:
        job_id = jobs.submit(s, JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t",
                                        **job))
    with host.db.write() as s:
        number = attempts.assign(s, job_id, 0, HOST, [0], lease_s=LEASE_S)
    assert number == 1
    lease_from = clock()
    with host.db.single() as s:
        row = attempts.start(s, job_id, number, HOST, boot_id="b",
                             log_path=host.log_path(job_id, number), lease_s=LEASE_S)
    assert row is not None
    spec = AttemptSpec.of(row, job_id, number, chips=tuple(row.chips),
                          lease_until=lease_from + LEASE_S)
    sup = Supervisor(host, spec)
    sup.start()
    host.keepers.wait_launched()
    return sup, job_id


def finished(host: Host, sup: Supervisor) -> None:
    assert host.done.wait(WAIT_S), "the supervisor did not end"
    sup.join(WAIT_S)
    assert not sup.is_alive()


def rows(db: Database, job_id: int, number: int = 1) -> tuple[Job, Attempt]:
    with db.read() as s:
        job = s.get(Job, job_id)
        att = s.scalars(select(Attempt).where(Attempt.job_id == job_id,
                                              Attempt.number == number)).one()
        assert job is not None
        s.expunge_all()
    return job, att


def test_a_job_that_exits_0_succeeds_with_its_exit_code(host, keeper, job_process):
    sup, job_id = supervise(host)
    keeper.says(Ended(code=0, signalled=False))
    finished(host, sup)
    job, att = rows(host.db, job_id)
    assert (job.state, job.exit_code) == ("succeeded", 0)
    assert (att.outcome, att.exit_code, att.exit_signal) == ("succeeded", 0, None)
    assert (att.pid, att.proc_start) == (job_process.pid, proc_start_ticks(job_process.pid)), \
        "the process was recorded with its start time"
    launch = keeper.launched[0]
    assert (launch.job_id, launch.attempt, launch.host, launch.argv) == \
        (job_id, 1, HOST, ["/bin/true"])
    assert keeper.sent() == [Collected()], "the end recorded, the keeper may go"
    assert sup.ending is not None and sup.ending.outcome is Outcome.SUCCEEDED


def test_a_job_over_before_its_process_is_recorded_has_both_written_at_once(
        host, keeper, job_process):
    """A short job's end is there when its start is read: its process (pid, start
    ticks) goes into the end's transaction, one write for the two."""
    keeper.ends_at_once = Ended(code=0, signalled=False)
    begun: list[int] = []  # transactions begun once the keeper launched the job
    said: list[str] = []  # and the statements sent
    event.listen(host.db.engine, "begin",
                 lambda conn: begun.append(1) if keeper.launched else None)
    event.listen(host.db.engine, "before_cursor_execute",
                 lambda conn, cursor, sql, *rest: said.append(sql) if keeper.launched else None)
    sup, job_id = supervise(host)
    finished(host, sup)
    assert len(begun) == 1, "the process and the end were written in one transaction"
    assert [sql for sql in said if "pid=" in sql] == \
        [sql for sql in said if "pid=" in sql and "outcome=" in sql] != [], \
        "in the attempt's update of its end, not a statement of its own"
    job, att = rows(host.db, job_id)
    assert (job.state, att.outcome) == ("succeeded", "succeeded")
    assert (att.pid, att.proc_start) == (job_process.pid, proc_start_ticks(job_process.pid))
    assert keeper.sent() == [Collected()]


def test_exit_75_requeues_the_job_uncharged(host, keeper):
    sup, job_id = supervise(host, max_retries=0)
    keeper.says(Ended(code=75, signalled=False))
    finished(host, sup)
    job, att = rows(host.db, job_id)
    assert (job.state, job.failures) == ("queued", 0), \
        "requeued, and not counted: with no retries left a charged one would have failed"
    assert (att.outcome, att.exit_code) == ("requeued", 75)
    assert "EX_TEMPFAIL" in (att.reason or "")
    assert keeper.sent() == [Collected()]


def test_a_keeper_that_dies_mid_run_gets_its_job_killed_and_requeued(host, keeper,
                                                                      job_process):
    """No exit file: how the job ended is unknown, so its process (verified by pid and
    start time, as recorded) is killed and the attempt is the host's fault."""
    sup, job_id = supervise(host, max_retries=0)
    keeper.dies()
    finished(host, sup)
    assert job_process.wait(WAIT_S) == -9, "the job's process was SIGKILLed"
    job, att = rows(host.db, job_id)
    assert (job.state, job.failures) == ("queued", 0)
    assert att.outcome == "host_error" and "keeper died" in (att.reason or "")
    assert keeper.sent() == [], "a keeper that is gone is told nothing"


def test_a_keeper_that_dies_after_writing_its_exit_file_has_that_end_recorded(
        host, keeper, job_process):
    sup, job_id = supervise(host)
    with open(outcome.exit_path(sup.log_path), "wb") as f:
        f.write(encode(Ended(code=0, signalled=False, instance=host.instance)))
    keeper.dies()
    finished(host, sup)
    job, att = rows(host.db, job_id)
    assert (job.state, att.outcome, att.exit_code) == ("succeeded", "succeeded", 0)
    assert job_process.poll() is None, "an end that is known kills nothing"
    assert keeper.sent() == []


def test_a_cancel_sends_the_jobs_stop_signal_and_grace_then_records_cancelled(host, keeper):
    sup, job_id = supervise(host, stop_signal="SIGUSR1", grace_s=7)
    with host.db.write() as s:
        assert jobs.request_stop(s, job_id, "u", StopRequest.CANCEL).ok
    sup.notify()  # what the agent does on a stop doorbell
    keeper.wait_received(Stop)
    keeper.says(Ended(signal=10, signalled=True))
    finished(host, sup)
    job, att = rows(host.db, job_id)
    assert (job.state, att.outcome, att.exit_signal) == ("cancelled", "cancelled", 10)
    lease, stop, collected = keeper.sent()
    assert isinstance(lease, Lease) and lease.until >= sup.spec.lease_until, \
        "the renewal that read the stop request moved the keeper's lease on"
    assert stop == Stop(signal="SIGUSR1", grace=7.0)
    assert collected == Collected()


def test_a_lease_taken_by_another_host_kills_the_job_and_records_nothing(host, keeper):
    """Fenced: the reaper gave the attempt up and the job went to another host. The
    renewal is refused, the job is killed, and its end is not this host's to record."""
    sup, job_id = supervise(host)
    with host.db.write() as s:
        assert attempts.finish(s, job_id, 1, HOST, Ending(Outcome.LOST, "lease expired"),
                               retry_backoff_s=0, actor="reaper") is not None
        assert attempts.assign(s, job_id, 1, "h1", [0], lease_s=LEASE_S) == 2
    sup.notify()
    keeper.wait_received(Kill)
    keeper.says(Ended(signal=9, signalled=True))
    finished(host, sup)
    assert keeper.sent() == [Kill()], "no lease for a lost attempt, no Collected"
    assert sup.ending is None
    job, old = rows(host.db, job_id)
    assert (job.state, job.attempt, job.host) == ("assigned", 2, "h1"), "the new attempt's"
    assert (old.outcome, old.exit_signal) == ("lost", None), "as the reaper recorded it"
