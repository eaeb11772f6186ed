"""One worker's task of a slice job: gather at the start barrier, run, stop with the gang.

A GangTask is a Supervisor (keeper, lease renewal, stop signal, grace, kill) whose lease
is its worker's row (state/gangs.py) and whose end is recorded there. Worker 0's task
also holds the job's own lease and decides for the gang:

- **Start.** Every worker makes its TPU free (orphans killed, a foreign holder refused,
  a stale libtpu lock removed) and its directories, then marks itself ready. Worker 0
  moves the job to running once every worker is ready, and only then does any worker
  start its process. A worker that cannot get ready, or a barrier not complete within
  `TPUQ_GANG_START_S` of the assignment, ends the attempt as a host error: requeued,
  not charged, and nothing ran anywhere.
- **Stop.** A worker whose process ends by itself other than with exit 0, or whose agent
  stops renewing its row, stops the gang: the job gets the gang's stop request, every
  worker's renewal sees it and sends its process the stop signal, grace, kill. A cancel,
  a notice on any worker's host or a time limit reach every worker the same way.
- **End.** Worker 0 keeps the job's lease until every worker has ended (or lost its
  lease, past a margin by which its keeper has stopped it) and records the attempt's
  end with the outcome gangs.gang_ending decides. That releases every worker's chips
  in one transaction, and every other worker's next renewal finds itself fenced out.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import select
import time
from typing import Any, Protocol

from tpuq.agent.attempts import outcome
from tpuq.agent.attempts.outcome import Progress
from tpuq.agent.attempts.spec import AttemptSpec
from tpuq.agent.attempts.supervisor import HostContext, Supervisor
from tpuq.agent.keeper.link import clock
from tpuq.agent.keeper.messages import Collected, Ended, FromKeeper, Started
from tpuq.state import attempts, gangs, hosts
from tpuq.state.attempts import Ending
from tpuq.state.outage import is_outage
from tpuq.state.states import JobState, Outcome, StopRequest

log = logging.getLogger("tpuq.agent")
POLL_S = 0.1  # the barrier and the end are awaited in the database, this often at most


class GangHost(HostContext, Protocol):
    """What a gang task needs of its host beyond a supervisor's (the Executor)."""

    boot_id: str
    held: hosts.Held

    def claim_tpu(self, chips: tuple[int, ...]) -> str | None:
        """The chips made free for a job, or why not (attempts/executor.py)."""

    def supervisors(self) -> list[Supervisor]: ...

    def gang_news(self) -> None:
        """Tell the other workers' agents to look now (team: a broadcast wake)."""


class GangTask(Supervisor):
    def __init__(self, ctx: GangHost, spec: AttemptSpec, start_by: float) -> None:
        super().__init__(ctx, spec)
        self.host = ctx
        assert spec.gang is not None
        self.worker, self.workers, self.slice = spec.gang.worker, spec.gang.workers, \
            spec.gang.slice
        self.start_by = start_by  # monotonic: the barrier's deadline
        self._job_renewed = 0.0

    @property
    def leads(self) -> bool:
        return self.worker == 0

    # ---- the start barrier -------------------------------------------------------------
    def _run(self) -> None:
        if self._gather():
            super()._run()

    def _gather(self) -> bool:
        """True once the gang may start (the job is running at this attempt)."""
        spec, db = self.spec, self.ctx.db
        for older in self.host.supervisors():  # an earlier attempt still being stopped here
            if older.spec.job_id == spec.job_id and older.spec.attempt < spec.attempt:
                older.join(older.spec.grace_s + 10.0)
        held = self.host.claim_tpu(spec.chips)
        if held is not None:
            return self._not_ready(held, busy=True)
        try:
            self.ctx.prepare_dirs(spec)
        except OSError as e:
            return self._not_ready(f"cannot make the job's directories: {e}")
        with db.write() as s:
            if not gangs.ready(s, spec.job_id, spec.attempt, self.worker):
                return False  # cancelled or taken away meanwhile
        self.host.gang_news()
        while True:
            went = self._lead_start() if self.leads else self._await_start()
            if went is not None:
                return went
            self._pause(POLL_S)

    def _not_ready(self, reason: str, *, busy: bool = False) -> bool:
        """`busy`: foreign processes hold the chips; the host is marked busy in the
        transaction that gives this worker up."""
        log.warning("job %s attempt %s worker %s not ready: %s", self.spec.job_id,
                    self.spec.attempt, self.worker, reason)
        with self.ctx.db.write() as s:
            if busy:
                self.host.held.set_busy(s, reason)
            gangs.ended(s, self.spec.job_id, self.spec.attempt, self.worker,
                        Ending(Outcome.HOST_ERROR, f"not ready: {reason}", untouched=True))
        if self.leads:
            self._end_attempt(Ending(Outcome.HOST_ERROR, f"gang start: worker 0 "
                                     f"({self.ctx.name}) not ready: {reason}"))
        else:
            self.host.gang_news()
        return False

    def _lead_start(self) -> bool | None:
        """Worker 0: start the gang when all are ready, give up when one cannot be or
        the deadline passed; None: not yet."""
        spec = self.spec
        with self.ctx.db.read() as s:
            ms = gangs.members(s, spec.job_id, spec.attempt)
        failed = [m for m in ms if m.state == "ended"]
        late = [m for m in ms if m.state != "ready"]
        if failed or (late and time.monotonic() > self.start_by):
            m = (failed or late)[0]
            why = m.reason if failed else \
                f"not ready within {self.ctx.settings.gang_start_s:g}s (its agent is " \
                "slow, stopped, or cannot reach the database)"
            self._end_attempt(Ending(Outcome.HOST_ERROR, f"gang start: worker {m.worker} "
                                     f"({m.host}) {why}"))
            return False
        if late:
            self._renew_job_lease()
            return None
        lease_from = clock()
        with self.ctx.db.single() as s:
            started = attempts.start(s, spec.job_id, spec.attempt, self.fence_host,
                                     boot_id=self.host.boot_id, log_path=self.log_path,
                                     lease_s=self.ctx.settings.lease_s)
        if started is None:
            return False  # cancelled meanwhile
        self._leased_until(lease_from + self.ctx.settings.lease_s)
        log.info("job %s attempt %s: all %d workers of slice %s ready: starting", spec.job_id,
                 spec.attempt, self.workers, self.slice)
        self.host.gang_news()
        return True

    def _await_start(self) -> bool | None:
        with self.ctx.db.read() as s:
            row = gangs.worker_of(s, self.spec.job_id, self.spec.attempt, self.ctx.name)
        if row is None or row.job_attempt != self.spec.attempt or \
                row.state not in (JobState.ASSIGNED.value, JobState.RUNNING.value,
                                  JobState.PREEMPTING.value):
            return False  # the attempt ended before the start (worker 0 gave up, a cancel)
        if row.state != JobState.ASSIGNED.value:
            self._leased_until(clock() + self.ctx.settings.lease_s)
            return True
        if time.monotonic() > self.start_by + self.ctx.settings.lease_s:
            return False  # worker 0 is gone: its lease ends the attempt
        return None

    def _leased_until(self, until: float) -> None:
        """The lease the barrier's end gave this worker: the one its keeper starts with
        (the supervisor launches with `self.lease_until`; a lease from before the wait at
        the barrier has run out by the start, and the keeper would stop the job at once)."""
        self.spec = dataclasses.replace(self.spec, lease_until=until)
        self.lease_until = until

    def _pause(self, seconds: float) -> None:
        """Wait on the wake pipe (a gang_news from another worker's agent), at most this."""
        ready, _, _ = select.select([self._wake_r], [], [], seconds)
        if ready:
            os.read(self._wake_r, 4096)

    # ---- running: this worker's lease, and worker 0's watch over the others -------------
    def _first(self, msg: FromKeeper) -> Ended | None:
        if not isinstance(msg, Started):
            return super()._first(msg)
        self.pid = msg.pid
        spec = self.spec
        log.info("job %s attempt %s worker %s: started, pid %s", spec.job_id, spec.attempt,
                 self.worker, self.pid)

        def record() -> None:
            with self.ctx.db.write() as s:
                gangs.running(s, spec.job_id, spec.attempt, self.worker, pid=self.pid,
                              proc_start=msg.start_ticks, log_path=self.log_path,
                              lease_s=self.ctx.settings.lease_s)
                if self.leads:
                    attempts.record_process(s, spec.job_id, spec.attempt, self.pid or 0,
                                            msg.start_ticks)

        self._write(record, "recording the process of")
        return None

    @property
    def fence_host(self) -> str:
        return self.slice

    def _lease_in(self, s: Any, progress: Progress | None) -> attempts.Lease:
        """This worker's lease; worker 0's also renews the job's and watches the others."""
        spec = self.spec
        lease = gangs.renew(s, spec.job_id, spec.attempt, self.worker, self.ctx.settings.lease_s)
        if lease.held and self.leads:
            lease = super()._lease_in(s, progress)
            self._watch(s)
        return lease

    def _watch(self, s: Any) -> None:
        """Worker 0: one worker's own end or loss stops the gang. A loss or a failure
        breaks it (no collective, a save included, can complete without that worker):
        the others get a short stop; an exit 75 gives them their grace."""
        ms = gangs.members(s, self.spec.job_id, self.spec.attempt, self._margin(),
                           self.ctx.settings.lease_s)
        cause = gangs.first_cause(ms)
        if cause is not None and gangs.stop_gang(s, self.spec.job_id, self.spec.attempt,
                                                 gangs.stop_reason(cause),
                                                 broken=gangs.breaks_the_gang(cause)):
            log.warning("job %s: %s", self.spec.job_id, gangs.stop_reason(cause))
            self.host.gang_news()

    def _margin(self) -> float:
        """A worker's lease must be this long past before it counts as lost. Its keeper
        has stopped its process before the lease ran out (the keeper's lease is the
        worker's, from the same renewals, counted from before each was sent); the margin
        only covers two clocks that do not quite agree."""
        return min(1.0, self.ctx.settings.lease_s / 10)

    def _watch_every(self) -> float | None:
        """Worker 0 looks for a lost or ended worker every second, not only at its
        renewals (a third of a lease): the others learn of a loss within seconds."""
        return min(1.0, self.ctx.settings.lease_s / 3) if self.leads else None

    def _watch_now(self) -> None:
        try:
            with self.ctx.db.read() as s:
                ms = gangs.members(s, self.spec.job_id, self.spec.attempt,
                                   self._margin(), self.ctx.settings.lease_s)
            if gangs.first_cause(ms) is None:
                return
            with self.ctx.db.write() as s:
                self._watch(s)
        except Exception as e:
            if not is_outage(e):
                raise  # the database is away: the next renewal or watch looks again

    def _stop_grace(self, stop_request: str | None) -> float:
        if stop_request == StopRequest.BROKEN.value:
            return min(self.spec.grace_s, self.ctx.settings.gang_stop_s)
        return self.spec.grace_s

    def _fenced_end(self, ended: Ended) -> None:
        """The attempt ended without this worker (worker 0 or the reaper ended it) and
        its process was stopped: the worker's row says so."""
        spec = self.spec
        end = outcome.ending_of(ended, self.log_path)

        def record() -> Ending | None:
            with self.ctx.db.write() as s:
                return gangs.ended(s, spec.job_id, spec.attempt, self.worker, end)

        recorded = self._write(record, "recording a worker's end of")
        if self.link is not None:
            self.link.send(Collected())
        log.info("job %s attempt %s worker %s: %s", spec.job_id, spec.attempt, self.worker,
                 outcome.words(recorded or end))

    # ---- the end ----------------------------------------------------------------------
    def _finish(self, end: Ending) -> None:
        """This worker's end (the attempt's is worker 0's to record, `_conclude`)."""
        spec = self.spec

        def record() -> Ending | None:
            with self.ctx.db.write() as s:
                recorded = gangs.ended(s, spec.job_id, spec.attempt, self.worker, end)
                if end.untouched and end.outcome is not Outcome.SUCCEEDED:
                    gangs.stop_gang(s, spec.job_id, spec.attempt,
                                    f"worker {self.worker} ({self.ctx.name}) ended "
                                    f"({end.reason}): stopping the gang",
                                    broken=end.outcome not in (Outcome.REQUEUED,
                                                               Outcome.PREEMPTED))
                return recorded

        recorded = self._write(record, "recording a worker's end of")
        self.ending = end
        log.info("job %s attempt %s worker %s: %s", spec.job_id, spec.attempt, self.worker,
                 outcome.words(recorded or end))
        self.host.gang_news()
        if self.leads:
            self._conclude()

    def _conclude(self) -> None:
        """Worker 0, its own process over: hold the job's lease until every worker ended,
        then end the attempt as the gang's ends say."""
        spec = self.spec
        while True:
            try:
                with self.ctx.db.write() as s:
                    ms = gangs.members(s, spec.job_id, spec.attempt, self._margin(),
                                       self.ctx.settings.lease_s)
                    if gangs.gang_ending(ms) is None:
                        self._watch(s)
                    else:  # no row of the attempt reads running once it is over
                        hosts.mark_lost(s, gangs.close_lost(s, spec.job_id, spec.attempt,
                                                            self._margin()))
            except Exception as e:
                if not is_outage(e):
                    raise
                ms = []
            end = gangs.gang_ending(ms) if ms else None
            if end is not None:
                self._end_attempt(end)
                return
            if not self._renew_job_lease():
                return  # fenced out: the reaper or a cancel ended the attempt
            self._pause(POLL_S * 5)

    def _renew_job_lease(self) -> bool:
        """Worker 0 before its process starts and after it ends: the job's lease alone
        (the base renewal, without this worker's row). False: fenced out."""
        now = time.monotonic()
        if now - self._job_renewed < self.ctx.settings.lease_s / 3:
            return True
        spec = self.spec
        lease = self._renewing(lambda s: attempts.renew(
            s, spec.job_id, spec.attempt, self.slice, self.ctx.settings.lease_s))
        if lease is None:
            return True  # the database is away: try again; the reaper waits out the lease
        self._job_renewed = now
        return lease.held

    def _end_attempt(self, end: Ending) -> None:
        self._record_end(end)
        self.host.gang_news()
