"""Supervises one attempt from the agent: launch it under a keeper, renew its lease, pass
stop requests on, record how it ended.

The job's parent is its keeper (keeper/process.py), not the agent: the agent may crash, be
upgraded or freeze and the job neither dies with it nor outruns its lease. This thread
is the agent's half: it waits on the keeper's socket and a wake pipe, never on a sleep,
and asks AttemptDeadlines (attempts/deadlines.py) what is due when. Each lease renewal that
reaches the database is passed on to the keeper as "valid until"; one that does not
lets the keeper stop the job before the lease can run out.
"""

from __future__ import annotations

import logging
import os
import selectors
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from tpuq import checkpoints
from tpuq.agent.attempts import functionjob, identity, outcome
from tpuq.agent.attempts.deadlines import AttemptDeadlines, Verdict
from tpuq.agent.attempts.outcome import Progress
from tpuq.agent.attempts.spec import AttemptSpec
from tpuq.agent.keeper.link import KeeperGone, KeeperLink, Keepers, clock
from tpuq.agent.keeper.messages import (
    Collected,
    Ended,
    FromKeeper,
    Kill,
    Launch,
    Lease,
    Say,
    Started,
    Status,
    Stop,
)
from tpuq.agent.local.terminals import Terminals
from tpuq.settings import Settings
from tpuq.state import attempts, jobs
from tpuq.state.attempts import Ending
from tpuq.state.db import Database
from tpuq.state.outage import is_outage, until_written
from tpuq.state.states import Outcome, StopRequest

log = logging.getLogger("tpuq.agent")
T = TypeVar("T")
JOB_UMASK = 0o022  # a job's files are as a login shell would make them (the agent's: 077)
# a session waits this long for its caller's terminal once its attempt starts here (a
# caller elsewhere reaches this host over SSH first)
ATTACH_WAIT_S = 60.0
# a job that ends this soon after its start has its process written with its end, one
# write for the two (an array of short tasks, say). Meanwhile its keeper holds it, and a
# restarted agent adopts it from there; were the keeper killed too, the start-up sweep
# finds the orphan by its environment (tests/e2e/test_host_ownership.py)
SHORT_JOB_S = 0.05
# what a session is told before the stop signal, by why it is stopped
STOP_WORDS = {"cancel": "the session was cancelled", "preempt": "the host is preempted",
              "timeout": "the session reached its time limit (--time)"}


class HostContext(Protocol):
    """What a supervisor needs of its host (the Executor)."""

    settings: Settings
    db: Database
    name: str
    terminals: Terminals

    @property
    def keepers(self) -> Keepers:
        """Who launches an attempt under a keeper (the Executor's KeeperServer)."""
        ...

    @property
    def instance(self) -> str:
        """The database's random id (attempts/workdirs.py)."""
        ...

    def log_path(self, job_id: int, attempt: int, worker: int | None = None) -> str: ...

    def checkpoint_dir(self, spec: AttemptSpec) -> str: ...

    def prepare_dirs(self, spec: AttemptSpec) -> None: ...

    def attempt_env(self, spec: AttemptSpec, progress_path: str) -> dict[str, str]: ...

    def chip_lock_paths(self, chips: tuple[int, ...]) -> list[str]: ...

    def attempt_done(self, sup: Supervisor) -> None: ...

    def tpu_busy(self, message: str, chips: tuple[int, ...]) -> str | None: ...

    def platform_notice(self) -> str | None: ...


class Supervisor(threading.Thread):
    """`adopted`: the link to a keeper an earlier agent's life launched, and what it
    said when this agent connected."""

    def __init__(self, ctx: HostContext, spec: AttemptSpec,
                 adopted: tuple[KeeperLink, FromKeeper] | None = None) -> None:
        super().__init__(name=f"job-{spec.job_id}.{spec.attempt}", daemon=True)
        self.ctx = ctx
        self.spec = spec
        self.link: KeeperLink | None = None
        self.pid: int | None = None
        # (pid, start ticks) of a process that ended before it was recorded: written
        # with its end, in the same transaction
        self._unrecorded: tuple[int, int | None] | None = None
        self._progress_shown: outcome.Progress | None = None  # last step written live
        self._adopted = adopted
        self._wake_r, self._wake_w = os.pipe()
        self._kill_now = False
        self._detach = False
        self._stop_sent = False
        # host-local checkpoints: whether the directory was seen holding something (the
        # job then waits for this host when requeued); a shared root needs no watching
        self._ckpt_seen = bool(ctx.settings.checkpoint_root)
        self.ending: Ending | None = None
        self.lease_until = spec.lease_until  # clock(): as the last renewal left it
        if adopted is not None:
            self.notify()  # renew the lease at once: the keeper's may be running out

    # ---- called from other threads ---------------------------------------------------
    def notify(self) -> None:
        """Check the database for a stop request now, not at the next renewal."""
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def kill_now(self) -> None:
        """Second-stage stop: SIGKILL without waiting out the grace."""
        self._kill_now = True
        self.notify()

    def detach(self) -> None:
        """The agent hands over (an upgrade): leave the job to its keeper and go."""
        self._detach = True
        self.notify()

    @property
    def log_path(self) -> str:
        return self.ctx.log_path(self.spec.job_id, self.spec.attempt, self.spec.worker)

    @property
    def handed_over(self) -> bool:
        return self._detach and self.ending is None

    # ---- the attempt -----------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except Exception:  # noqa: BLE001 - the attempt must end in the database whatever broke
            log.exception("supervisor of job %s failed", self.spec.job_id)
            if self.link is not None:
                self.link.send(Kill())
            self._finish(Ending(Outcome.HOST_ERROR, "agent error while supervising (see agent log)"))
        finally:
            if self.link is not None:
                self.link.close()
            os.close(self._wake_r)
            os.close(self._wake_w)
            self.ctx.attempt_done(self)

    def _run(self) -> None:
        spec = self.spec
        if self._adopted is not None:
            self.link, first = self._adopted
            log.info("job %s attempt %s: adopted from its keeper", spec.job_id, spec.attempt)
        else:
            tty = self._terminal() if spec.session else None
            if spec.session and tty is None:
                return
            try:
                try:
                    launch = self._launch()
                except (OSError, ValueError, identity.NoAccount) as e:
                    self._finish(Ending(Outcome.FAILED, f"could not start: {e}"))
                    return
                self.link, first = self.ctx.keepers.launch(launch, tty)
            finally:
                if tty is not None:
                    os.close(tty)  # the keeper has its own copy
        ended = self._first(first)
        if ended is None:
            ended = self._wait()
        if ended is None:  # handed over, or fenced out in the database
            return
        if spec.runs_function:
            self._write(lambda: functionjob.stage_out(self.ctx.db, spec.job_id, spec.attempt,
                                                      self.log_path), "storing its result")
        end = outcome.ending_of(ended, self.log_path,
                                lambda said: self.ctx.tpu_busy(said, spec.chips))
        if not self._stop_sent:  # the platform's SIGTERM, not ours (outcome.under_notice)
            end = outcome.under_notice(end, self.ctx.platform_notice())
        self._finish(end)
        self.link.send(Collected())

    def _terminal(self) -> int | None:
        """A session's terminal, once its caller handed it to this agent (the lease
        renewed meanwhile); None when it ended first (recorded) or was fenced out."""
        spec = self.spec
        deadline = time.monotonic() + ATTACH_WAIT_S
        every = max(self.ctx.settings.lease_s / 3, 0.05)
        while True:
            left = deadline - time.monotonic()
            tty = self.ctx.terminals.take(spec.job_id, max(0.0, min(every, left)))
            if tty is not None:
                return tty
            if left <= 0:
                self._finish(Ending(Outcome.FAILED, f"no terminal was attached within "
                                    f"{ATTACH_WAIT_S:g}s of its start (`tpuq run --attach "
                                    f"{spec.job_id}` on {self.ctx.name})"))
                return None
            if self._detach:
                return None
            asked_at = clock()
            lease = self._renew()
            if lease is None:
                continue
            if not lease.held:
                return None  # no longer this host's: nothing to record
            self.lease_until = asked_at + self.ctx.settings.lease_s
            if lease.stop_request:
                self._finish(Ending(Outcome.CANCELLED, "stopped before its terminal was "
                                    "attached"))
                return None

    def _launch(self) -> Launch:
        spec, ctx = self.spec, self.ctx
        ctx.prepare_dirs(spec)
        log_path = self.log_path
        env = ctx.attempt_env(spec, outcome.progress_path(log_path))
        argv, cwd = list(spec.command), spec.cwd
        if spec.runs_function:
            env.update(functionjob.stage_in(ctx.db, spec.job_id, log_path))
        owner: dict[str, Any] = {}
        if ctx.settings.run_as == "owner":
            acct = identity.account(spec.owner, ctx.settings.run_as_min_uid)
            env.update(acct.env())
            self._hand_over(acct)
            argv, cwd = identity.in_dir(spec.cwd, argv), "/"
            owner = {"user": acct.uid, "group": acct.gid, "groups": list(acct.groups)}
        return Launch(
            job_id=spec.job_id, attempt=spec.attempt, host=ctx.name, argv=argv, env=env,
            cwd=cwd, log_path=log_path, exit_path=outcome.exit_path(log_path),
            run_dir=ctx.keepers.run_dir, lease_until=self.lease_until, tty=spec.session,
            instance=ctx.instance,
            lease_s=ctx.settings.lease_s, grace_s=spec.grace_s,
            log_max_bytes=ctx.settings.log_max_bytes, umask=JOB_UMASK,
            # a slice job's output file is worker 0's (one file, as SLURM's one job)
            output=spec.output if not spec.worker else None,
            chip_locks=ctx.chip_lock_paths(spec.chips), **owner)

    def _hand_over(self, acct: identity.Account) -> None:
        """What the job writes besides its output becomes its owner's: the checkpoint
        directory (kept across attempts) and the progress file tpuq.job appends to."""
        ckpt = self.ctx.checkpoint_dir(self.spec)
        if not checkpoints.is_url(ckpt):  # a bucket's access is its IAM's, not ours
            acct.give(ckpt)
        progress = outcome.progress_path(self.log_path)
        with open(progress, "ab"):
            pass
        acct.give(progress)
        if self.spec.runs_function:
            for path in functionjob.paths(self.log_path):
                acct.give(path)

    def _first(self, msg: FromKeeper) -> Ended | None:
        """What the keeper said first: its job's process (recorded), or that it ended."""
        if isinstance(msg, Status):
            if msg.ended is not None:
                return msg.ended
            self.pid = msg.pid
            return None
        if isinstance(msg, Ended):
            return msg
        if not isinstance(msg, Started):
            return None  # a refused launch raised in Keepers.launch
        self.pid = msg.pid
        pid, ticks = self.pid or 0, msg.start_ticks
        spec = self.spec
        log.info("job %s attempt %s: started, pid %s", spec.job_id, spec.attempt, pid)
        assert self.link is not None
        if self.link.ends_within(SHORT_JOB_S):  # the process is written with its end
            self._unrecorded = (pid, ticks)
            return None

        def record() -> None:
            with self.ctx.db.single() as s:
                attempts.record_process(s, spec.job_id, spec.attempt, pid, ticks)

        self._write(record, "recording the process")
        return None

    # ---- waiting ----------------------------------------------------------------------
    def _wait(self) -> Ended | None:
        """Until the attempt ends: how it ended (the keeper's report), or None when this
        agent handed it over or lost its lease in the database (then nothing is recorded)."""
        assert self.link is not None
        sel = selectors.DefaultSelector()
        sel.register(self.link.fileno(), selectors.EVENT_READ, "keeper")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        deadlines = AttemptDeadlines(
            now=time.monotonic(), renew_every_s=max(self.ctx.settings.lease_s / 3, 0.05),
            retry_every_s=self._retry_cap(), time_limit_s=self.spec.time_limit_s,
            grace_s=self.spec.grace_s, ran_s=self.spec.elapsed_s,
            watch_every_s=self._watch_every(),
            warn_s=warn_before(self.spec.time_limit_s) if self.spec.session else None)
        fenced = False
        try:
            while True:
                wait = 0.0 if self.link.has_pending else deadlines.wait_s(time.monotonic())
                events = sel.select(wait)
                woken = any(key.data == "wake" for key, _ in events)
                if woken:
                    os.read(self._wake_r, 4096)
                if self._detach:
                    return None
                try:
                    for msg in self.link.events():
                        if not isinstance(msg, Ended):
                            continue
                        if fenced:
                            self._fenced_end(msg)
                            return None
                        return msg
                except KeeperGone:
                    return self._keeper_lost()
                if not fenced and self._act(deadlines, woken):
                    fenced = True  # killed; wait for the keeper to say it is over
        finally:
            sel.close()

    def _act(self, deadlines: AttemptDeadlines, woken: bool) -> bool:
        """Do what is due now; True when the attempt was fenced out (and killed)."""
        assert self.link is not None
        due = deadlines.due(time.monotonic(), woken=woken, kill_now=self._kill_now)
        if due.kill:
            self.link.send(Kill())
        if due.warn:
            limit = self.spec.time_limit_s or 0.0
            self._say(f"tpuq: this session reaches its time limit ({_span(limit)}) in "
                      f"{_span(warn_before(limit))}; then it gets {self.spec.stop_signal}")
        if due.ask_timeout:
            self._request(StopRequest.TIMEOUT)
        if due.watch:
            self._watch_now()
        if not due.renew:
            return False
        asked_at = clock()
        lease = self._renew()
        verdict = deadlines.renewed(time.monotonic(), held=None if lease is None else lease.held,
                                    stop_requested=bool(lease and lease.stop_request))
        if verdict is Verdict.FENCED:
            log.warning("job %s attempt %s lost its lease; killing it", self.spec.job_id,
                        self.spec.attempt)
            self.link.send(Kill())
            return True
        if lease is not None:
            self.link.send(Lease(until=asked_at + self.ctx.settings.lease_s))
        if verdict is Verdict.SIGNAL and not self._stop_sent:
            grace = self._stop_grace(lease.stop_request if lease else None)
            if self.spec.session:
                self._say_stop(lease.stop_request if lease else None, grace)
            self.link.send(Stop(signal=self.spec.stop_signal, grace=grace))
            self._stop_sent = True
            deadlines.signalled(time.monotonic(), grace)
        return False

    def _say_stop(self, stop_request: str | None, grace: float) -> None:
        """Why the session stops, and when, before its stop signal."""
        why = STOP_WORDS.get(stop_request or "", "the session is stopped")
        notice = self.ctx.platform_notice()
        self._say(f"tpuq: {why}{f' ({notice})' if notice else ''}: it gets "
                  f"{self.spec.stop_signal} now, SIGKILL in {_span(grace)}")

    def _say(self, text: str) -> None:
        """A line in a session's terminal (nothing for other jobs)."""
        if self.spec.session and self.link is not None:
            self.link.send(Say(text=text))

    # ---- what a slice job's task does otherwise (attempts/gang.py) ------------------------------
    def _watch_every(self) -> float | None:
        """How often to look at the other workers of a slice job (None: not a leader)."""
        return None

    def _watch_now(self) -> None:
        """Look at the other workers now (between lease renewals)."""

    def _stop_grace(self, stop_request: str | None) -> float:
        """The grace a stop gives: the job's own."""
        return self.spec.grace_s

    def _fenced_end(self, ended: Ended) -> None:
        """The process of an attempt that is no longer this host's has ended (killed):
        nothing of the attempt is this host's to record."""
        log.info("job %s attempt %s: its process was stopped (the attempt was over)",
                 self.spec.job_id, self.spec.attempt)

    def _keeper_lost(self) -> Ended:
        """The keeper died (killed, OOM): its exit file, if it wrote one; else the job's
        fate is unknown, so it is killed (verified by pid and start time) and requeued."""
        log_path = self.log_path
        written = outcome.read_exit(log_path)
        if written is not None:
            return written
        from tpuq.agent.tpu import holders

        with self.ctx.db.read() as s:
            att = next((a for a in attempts.active_on_host(s, self.ctx.name)
                        if a[0].id == self.spec.job_id), None)
        if att is not None and att[1].pid and att[1].proc_start:
            holders.kill_and_wait([(att[1].pid, att[1].proc_start)],
                                  timeout=self.ctx.settings.chip_release_s)
        return Ended(error="its keeper died; the attempt's end is unknown (requeued)",
                     host_error=True)

    @property
    def fence_host(self) -> str:
        """The `host` the job's row names while this attempt holds it (a slice job's: its
        slice): every write of the job is fenced on it."""
        return self.ctx.name

    def _renew(self) -> attempts.Lease | None:
        """The lease renewed, or None while the database is unavailable."""
        progress = outcome.last_progress(outcome.progress_path(self.log_path))
        return self._renewing(lambda s: self._lease_in(s, progress))

    def _renewing(self, renew: Callable[[Any], attempts.Lease]) -> attempts.Lease | None:
        """One renewal's transaction, or None while the database is unavailable."""
        try:
            with self.ctx.db.write() as s:
                return renew(s)
        except Exception as e:
            if not is_outage(e):
                raise
            log.warning("job %s: lease not renewed, database unavailable: %s",
                        self.spec.job_id, str(e).splitlines()[0][:200])
            return None

    def _lease_in(self, s: Any, progress: Progress | None) -> attempts.Lease:
        """The renewal's writes, in its transaction: the job's lease, and the step the job
        last reported (live progress for `status`/`show`)."""
        spec = self.spec
        lease = attempts.renew(s, spec.job_id, spec.attempt, self.fence_host,
                               self.ctx.settings.lease_s)
        if lease.held and progress is not None and progress != self._progress_shown:
            attempts.record_progress(s, spec.job_id, spec.attempt, *progress)
            self._progress_shown = progress
        if lease.held and self._checkpoint_appeared():
            attempts.checkpoint_seen(s, spec.job_id, spec.attempt)
        return lease

    def _checkpoint_appeared(self) -> bool:
        """True once, when the host-local checkpoint directory first holds something."""
        if self._ckpt_seen or not checkpoints.has_content(self.ctx.checkpoint_dir(self.spec)):
            return False
        self._ckpt_seen = True
        return True

    def _retry_cap(self) -> float:
        """Retry writes well within a lease, so the reaper never takes a live job."""
        return max(0.05, min(2.0, self.ctx.settings.lease_s / 6))

    def _write(self, fn: Callable[[], T], what: str) -> T:
        """One transaction, retried through a database outage until it is written."""
        return until_written(fn, f"{what} job {self.spec.job_id}", max_wait_s=self._retry_cap())

    def _request(self, kind: StopRequest) -> None:
        def request() -> None:
            with self.ctx.db.write() as s:
                jobs.request_stop(s, self.spec.job_id, "agent", kind)

        self._write(request, f"asking {kind.value} of")

    # ---- the end ------------------------------------------------------------------------
    def _finish(self, end: Ending) -> None:
        self._record_end(end)
        self.ending = end

    def _record_end(self, end: Ending) -> None:
        """The attempt's end and the last step the job reported, in one transaction."""
        spec = self.spec
        progress = outcome.last_progress(outcome.progress_path(self.log_path))
        # the outcome must reach the database, however long it is away
        seen = self._checkpoint_appeared()
        recorded = self._write(
            lambda: outcome.record(self.ctx.db, spec.job_id, spec.attempt, self.fence_host,
                                   end, progress=progress, checkpoint_seen=seen,
                                   process=self._unrecorded,
                                   retry_backoff_s=self.ctx.settings.retry_backoff_s,
                                   host_retries=self.ctx.settings.host_error_retries),
            "recording the end of")
        if recorded is None:
            log.info("job %s attempt %s: ended, %s; the attempt was over already "
                     "(nothing recorded)", spec.job_id, spec.attempt, outcome.words(end))
        else:  # what show says: a stop request decides how the attempt counts
            log.info("job %s attempt %s: %s", spec.job_id, spec.attempt,
                     outcome.words(recorded))


def warn_before(time_limit_s: float | None) -> float:
    """How long before its time limit a session is told: a minute, or a quarter of a
    shorter limit."""
    return min(60.0, (time_limit_s or 0.0) / 4)


def _span(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else \
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{max(s, 0)}s"
