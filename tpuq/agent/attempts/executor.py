"""The host side of dispatch: doorbells in, supervised attempts out.

A doorbell (an in-process call in the embedded deployment, a Celery task in the team
one) only says "look at job J, attempt A". The executor reads the job from the
database, makes sure nobody else holds the chips' device files (killing tpuq's own
orphans, refusing to start beside a foreign process), and hands the attempt to a
Supervisor. Duplicate doorbells are dropped here and fenced again in the database.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tpuq import envinputs, jobenv
from tpuq.agent.attempts import outcome
from tpuq.agent.attempts.spec import AttemptSpec
from tpuq.agent.attempts.supervisor import Supervisor
from tpuq.agent.attempts.workdirs import WorkDirs
from tpuq.agent.keeper.link import KeeperLink, KeeperServer, clock
from tpuq.agent.keeper.messages import Ended, FromKeeper
from tpuq.agent.local.terminals import Terminals
from tpuq.agent.tpu import cleanup, devices, holders, libtpu
from tpuq.agent.tpu.chiplocks import lock_paths
from tpuq.agent.tpu.devwatch import DeviceWatch
from tpuq.settings import Settings
from tpuq.shapes import Seat
from tpuq.spec import SpecError, check_runnable
from tpuq.state import attempts, gangs, hosts, queries
from tpuq.state.attempts import Ending
from tpuq.state.db import Database
from tpuq.state.states import JobState, Outcome

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger("tpuq.agent")
# an attempt the leader's pass started here in its transaction (Executor.begin_start):
# (job, attempt), what the start statement returned, the clock its lease runs from
StartToken = tuple[tuple[int, int], Any, float]


class Executor:
    def __init__(self, settings: Settings, db: Database, held: hosts.Held, *, boot_id: str,
                 chips: list[devices.Chip], tpu_type: str | None,
                 on_change: Callable[[], None]) -> None:
        self.settings = settings
        self.db = db
        self.name = settings.host
        self.held = held  # writes this host's row
        self.boot_id = boot_id
        self.chips = {c.index: c for c in chips}
        self.tpu_type = tpu_type
        self.on_change = on_change  # wakes the scheduler: chips were freed or a host changed
        self.base_env = jobenv.from_agent(os.environ)
        # what every job on this host gets besides (jobenv.single_slice_env)
        self.host_env: dict[str, str] = {}
        self.notice_source: Callable[[], str | None] = lambda: None  # the agent's
        self._lock = threading.Lock()
        self._running: dict[tuple[int, int], Supervisor] = {}
        # attempts whose start the leader's pass wrote in its transaction, not yet
        # supervised (begin_start .. finish_start): no other start and no probe meanwhile
        self._starting: set[tuple[int, int]] = set()
        self.accepting = True
        self.end_hooks: list[Callable[[Supervisor], None]] = []  # e.g. final log shipping
        self.gang_news: Callable[[], None] = lambda: None  # wakes the slice's other agents
        self.in_slice = False  # a worker of a multi-host slice: it also polls slice tasks
        self.probing = False  # the shape probes run (tpu/probes.py): no attempt starts
        self._paths: dict[tuple[int, ...], set[str]] = {}
        self.devwatch = DeviceWatch(self._device_paths(tuple(self.chips)),
                                    trust_s=settings.devwatch_trust_s)
        with db.read() as s:
            self.dirs = WorkDirs(settings.logs_dir, settings.home, settings.checkpoint_root,
                                 queries.instance_id(s))
        # per host name: fake hosts (and a team's agents in tests) may share a home
        self.keepers = KeeperServer(os.path.join(settings.home, "run", self.name))
        self.terminals = Terminals()  # sessions' terminals (`tpuq run`), until they start

    # ---- the HostContext the supervisors use (supervisor.HostContext) ------------------
    def log_path(self, job_id: int, attempt: int, worker: int | None = None) -> str:
        return self.dirs.log_path(job_id, attempt, worker)

    def checkpoint_dir(self, spec: AttemptSpec) -> str:
        return self.dirs.checkpoint_dir(spec.job_id, spec.checkpoint_dir)

    def prepare_dirs(self, spec: AttemptSpec) -> None:
        """The attempt's checkpoint directory; an attempt that starts over says why at
        the top of its log (what `tpuq logs` shows first)."""
        self.dirs.make_checkpoint_dir(spec.job_id, spec.attempt, spec.checkpoint_dir)
        if spec.started_over:
            path = self.log_path(spec.job_id, spec.attempt, spec.worker)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "ab") as f:
                f.write(f"[tpuq: {spec.started_over}]\n".encode())

    @property
    def instance(self) -> str:
        return self.dirs.instance

    def read_exit(self, job_id: int, attempt: int) -> Ended | None:
        """How a keeper said the attempt ended, if it wrote it (for this database)."""
        ended = outcome.read_exit(self.log_path(job_id, attempt))
        if ended is None or ended.instance != self.instance:
            return None
        return ended

    def chip_lock_paths(self, chips: tuple[int, ...]) -> list[str]:
        return lock_paths(self.settings.chip_lock_dir, chips)

    def attempt_env(self, spec: AttemptSpec, progress_path: str) -> dict[str, str]:
        whole_host = spec.gang is not None or len(spec.chips) == len(self.chips)
        return jobenv.build_env(self.host_inputs(), envinputs.AttemptInputs(
            job_env=spec.env, job_id=spec.job_id, attempt=spec.attempt,
            checkpoint_dir=self.checkpoint_dir(spec), resumed=spec.resumed,
            chips=None if whole_host else list(spec.chips), tcmalloc=spec.tcmalloc,
            stop_signal=spec.stop_signal, progress_file=progress_path, seat=spec.gang))

    def host_inputs(self) -> envinputs.HostInputs:
        """What this host gives every attempt's environment (the probes' too)."""
        return envinputs.HostInputs(
            name=self.name, base=self.base_env, chip_count=len(self.chips),
            port_base=self.settings.port_base, tcmalloc_path=self.settings.tcmalloc_path,
            generation=devices.generation_of(self.tpu_type), host_env=self.host_env,
            coordinator_port=self.settings.coordinator_port)

    def attempt_done(self, sup: Supervisor) -> None:
        with self._lock:
            self._running.pop((sup.spec.job_id, sup.spec.attempt), None)
        if sup.handed_over:
            return  # the job runs on with its keeper, for the next agent
        self.on_change()
        for hook in self.end_hooks:
            hook(sup)

    def platform_notice(self) -> str | None:
        """The preemption or maintenance notice standing for this host now (the agent's
        notice policy, or the metadata server asked at once), or None."""
        return self.notice_source()

    def tpu_busy(self, message: str, chips: tuple[int, ...]) -> str | None:
        """A job's output says the TPU was busy: who holds its chips now, or None. A
        holder tpuq did not start marks the host busy, as at a start; and after any busy
        ending, inotify's "nobody opened them" is not trusted until a scan says so."""
        self.devwatch.distrust()
        foreign = self.clear_holders(chips)
        if not foreign:
            log.warning("job output says the TPU is busy (%s), but nobody holds chips %s",
                        message.strip(), ",".join(map(str, chips)))
            return None
        reason = holders.held_by(foreign)
        with self.db.write() as s:
            self.held.set_busy(s, reason)
        log.warning("job output says the TPU is busy: %s", reason)
        return reason

    # ---- starting attempts -------------------------------------------------------------
    def start_attempt(self, job_id: int, attempt: int) -> Supervisor | None:
        """Start `attempt` of `job_id` if it is still assigned here; idempotent.

        Returns the new supervisor, or None for a stale or duplicate doorbell. The
        `assigned -> running` transaction also reads what the job needs: one round trip
        to the database decides and loads.
        """
        key = (job_id, attempt)
        with self._lock:
            if not self._takes(key):
                return None
        lease_from = clock()  # the lease the start statement takes runs from no earlier
        with self.db.single() as s:
            j = self._start_row(s, job_id, attempt)
        if j is None:
            return None  # stale: cancelled, reassigned, or already running
        return self._spawn(j, job_id, attempt, lease_from)

    def begin_start(self, s: Session, job_id: int, attempt: int) -> StartToken | None:
        """The leader's pass assigned the attempt here (scheduler.passes.OwnStarts): its
        `assigned -> running` in the pass's transaction `s`, one commit for both. The
        token goes to finish_start once that commits (abandon_start if it does not); None
        when this host takes no start now (stopping, probing, already at it): the
        attempt then stays assigned for the doorbell and the poll, as any other host's."""
        key = (job_id, attempt)
        with self._lock:
            if not self._takes(key):
                return None
            self._starting.add(key)
        lease_from = clock()
        j = None
        try:
            j = self._start_row(s, job_id, attempt)
        finally:
            if j is None:  # stale, or the statement failed: nothing to hold
                self._release(key)
        return None if j is None else (key, j, lease_from)

    def finish_start(self, token: StartToken) -> Supervisor | None:
        """Its transaction committed: the attempt runs under a supervisor (or its end is
        recorded, as start_attempt's)."""
        (job_id, attempt), j, lease_from = token
        try:
            return self._spawn(j, job_id, attempt, lease_from)
        finally:
            self.abandon_start(token)  # a supervisor holds the attempt now, or nothing does

    def abandon_start(self, token: StartToken) -> None:
        """Its transaction did not commit (or the start is over): the reservation goes."""
        self._release(token[0])

    def _release(self, key: tuple[int, int]) -> None:
        with self._lock:
            self._starting.discard(key)

    def _takes(self, key: tuple[int, int]) -> bool:
        """Whether a start of `key` may begin now (the lock held): not at it already, not
        stopping, no shape probe running."""
        return key not in self._running and key not in self._starting and self.accepting \
            and not self.probing

    def _start_row(self, s: Session, job_id: int, attempt: int) -> Any:
        return attempts.start(s, job_id, attempt, self.name, boot_id=self.boot_id,
                              log_path=self.log_path(job_id, attempt),
                              lease_s=self.settings.lease_s)

    def _spawn(self, j: Any, job_id: int, attempt: int, lease_from: float
               ) -> Supervisor | None:
        spec = self._runnable(j, job_id, attempt, self.name, chips=tuple(j.chips),
                              lease_until=lease_from + self.settings.lease_s)
        if spec is None or not self._host_ready(spec):
            return None
        return self.supervise(spec)

    def _runnable(self, job: Any, job_id: int, attempt: int, fence_host: str | None,
                  **more: Any) -> AttemptSpec | None:
        """The attempt as its supervisor needs it; a spec that cannot run (written by a
        hand that bypassed validation) fails the attempt instead: None."""
        try:
            check_runnable(job.command, job.cwd, job.env, job.stop_signal)
        except SpecError as e:
            with self.db.write() as s:
                attempts.finish(s, job_id, attempt, fence_host,
                                Ending(Outcome.FAILED, f"cannot be started: {e}"),
                                retry_backoff_s=self.settings.retry_backoff_s)
            return None
        return AttemptSpec.of(job, job_id, attempt, **more)

    def begin_probe(self) -> bool:
        """Hold every start while the shape probes run; False while an attempt runs."""
        with self._lock:
            if self._running or self._starting or not self.accepting:
                return False
            self.probing = True
            return True

    def end_probe(self) -> None:
        with self._lock:
            self.probing = False
        self.on_change()  # assigned attempts waited: the heartbeat's poll starts them

    def supervise(self, spec: AttemptSpec,
                  adopted: tuple[KeeperLink, FromKeeper] | None = None) -> Supervisor:
        """A supervisor for the attempt: for a new one, or for one an earlier agent's
        life left with its keeper (`adopted`)."""
        sup = Supervisor(self, spec, adopted)
        with self._lock:
            self._running[(spec.job_id, spec.attempt)] = sup
        sup.start()
        return sup

    def start_gang(self, job_id: int, attempt: int) -> Supervisor | None:
        """Start this host's task of a slice job's attempt (agent/attempts/gang.py) if it is still
        waiting for this worker; idempotent. None for a stale or duplicate doorbell."""
        from tpuq.agent.attempts.gang import GangTask

        key = (job_id, attempt)
        with self._lock:
            if not self._takes(key):
                return None
        with self.db.read() as s:
            row = gangs.worker_of(s, job_id, attempt, self.name)
        if row is None or row.gang_state != "assigned" or row.job_attempt != attempt \
                or row.state != JobState.ASSIGNED.value:
            return None
        spec = self._runnable(row, job_id, attempt, None, chips=tuple(sorted(self.chips)),
                              lease_until=clock(), gang=Seat(row.host, row.worker, row.tpu_type or "",
                                                        hosts=row.workers))
        if spec is None:
            return None
        waited = max(0.0, float(row.now) - float(row.assigned_at))
        task = GangTask(self, spec, time.monotonic() + self.settings.gang_start_s - waited)
        with self._lock:
            if key in self._running or not self.accepting:
                return None  # a doorbell and the poll at once: one of them starts it
            self._running[key] = task
        task.start()
        return task

    def poll_assigned(self) -> None:
        """Recover lost doorbells: anything assigned here that nobody supervises."""
        with self.db.read() as s:
            waiting = attempts.assigned_to(s, self.name)
            slice_tasks = gangs.assigned_to(s, self.name) if self.in_slice else []
        for job_id, attempt in waiting:
            self.start_attempt(job_id, attempt)
        for job_id, attempt in slice_tasks:
            self.start_gang(job_id, attempt)

    # ---- the TPU must be ours before a job starts ---------------------------------------
    def _device_paths(self, chips: tuple[int, ...]) -> set[str]:
        """Resolved device paths of these chips (resolved once: device nodes do not move)."""
        paths = self._paths.get(chips)
        if paths is None:
            paths = devices.host_device_paths(self.chips[c] for c in chips if c in self.chips)
            self._paths[chips] = paths
        return paths

    def _supervised_pids(self) -> set[int]:
        with self._lock:
            return {s.pid for s in self._running.values() if s.pid is not None}

    def _classify(self, found: list[holders.ProcInfo]) -> tuple[
            list[holders.ProcInfo], list[holders.ProcInfo], list[holders.ProcInfo]]:
        """(orphans of earlier tpuq attempts on this host, processes of attempts running
        here, processes tpuq did not start)."""
        with self._lock:
            live = {(str(j), str(a)) for j, a in self._running}
        orphans, running, foreign = [], [], []
        for p in found:
            m = p.environ_marker
            if not holders.started_here(m, self.name, self.dirs.marks):
                foreign.append(p)
            elif (m["TPUQ_JOB_ID"], m.get("TPUQ_ATTEMPT", "")) in live:
                running.append(p)
            else:
                orphans.append(p)
        return orphans, running, foreign

    def clear_holders(self, chips: tuple[int, ...],
                      wait_s: float | None = None) -> list[holders.ProcInfo]:
        """Kill tpuq orphans holding these chips; return the holders left: foreign ones,
        and orphans that still hold a chip `wait_s` (TPUQ_CHIP_RELEASE_S) after the kill.
        The next job starts only once nobody holds its chips, however long a dying
        process takes to let go of them (vfio devices can take seconds).

        The /proc scan is skipped when inotify shows that every open of these device
        files since the last scan that found them free has been closed (tpu/devwatch.py).
        """
        paths = self._device_paths(chips)
        if self.devwatch.quiet(paths):
            return []
        self.devwatch.scan_starts(paths)
        found = holders.find_holders(paths, exclude_pids=self._supervised_pids())
        if not found:
            self.devwatch.scan_found_free(paths)
        orphans, _, foreign = self._classify(found)
        if orphans:
            log.warning("killing orphans of earlier attempts: %s",
                        "; ".join(holders.describe(p) for p in orphans))
            alive = holders.kill_and_wait(
                [(p.pid, p.start_ticks) for p in orphans],
                timeout=self.settings.chip_release_s if wait_s is None else wait_s)
            foreign += [p for p in orphans if p.pid in alive]
        return foreign

    def _host_ready(self, w: AttemptSpec) -> bool:
        reason = self.claim_tpu(w.chips)
        if reason is None:
            return True
        with self.db.write() as s:  # one transaction: nobody sees the host busy and the job on it
            self.held.set_busy(s, reason)
            attempts.finish(s, w.job_id, w.attempt, self.name, Ending(Outcome.HOST_ERROR, reason),
                            retry_backoff_s=self.settings.retry_backoff_s,
                            host_retries=self.settings.host_error_retries)
        log.warning("%s: not starting job %s", reason, w.job_id)
        return False

    def claim_tpu(self, chips: tuple[int, ...]) -> str | None:
        """Make these chips a job's to start on: tpuq's orphans killed and, for the whole
        host, a stale libtpu lock removed. Else why not: processes tpuq did not start hold
        them. The caller marks the host busy with that reason, in the transaction that
        gives the attempt up, until they exit (check_busy)."""
        foreign = self.clear_holders(chips)
        if foreign:
            return holders.held_by(foreign)
        if len(chips) == len(self.chips):
            # whole host and nobody holds a device: a libtpu lock file left now is stale
            removed = libtpu.clean_stale_lock(self.settings.libtpu_lockfile, holders_alive=False)
            if removed:
                log.info("removed stale libtpu lock: %s", ", ".join(removed))
        return None

    def free_tpu(self) -> cleanup.CleanReport:
        """Free the whole TPU on request (`tpuq pod clean`): orphans killed, every other
        holder named, a stale libtpu lock removed only while no attempt runs here."""
        def classify(found: list[holders.ProcInfo]) -> tuple[
                list[holders.ProcInfo], list[tuple[holders.ProcInfo, str]]]:
            orphans, running, foreign = self._classify(found)
            return orphans, [*((p, f"tpuq job {p.environ_marker[jobenv.JOB_ID]}") for p in running),
                             *((p, "foreign") for p in foreign)]

        jobs = [f"job {s.spec.job_id} attempt {s.spec.attempt}" for s in self.supervisors()]
        return cleanup.free_tpu(self.settings, self._device_paths(tuple(self.chips)), classify,
                                jobs=jobs)

    def check_busy(self) -> None:
        """While the host is marked busy, look again; clear it once the foreigner is gone."""
        with self.db.read() as s:
            host = hosts.get(s, self.name)
            reason = host.busy_reason if host else None
        if reason is None:
            return
        # a short wait: this runs on every heartbeat until they are gone
        foreign = self.clear_holders(tuple(self.chips), wait_s=min(
            1.0, self.settings.chip_release_s))
        if not foreign:
            with self.db.write() as s:
                self.held.set_busy(s, None)
            log.info("TPU is free again")
            self.on_change()

    # ---- stopping ------------------------------------------------------------------------
    def supervisor(self, job_id: int, attempt: int) -> Supervisor | None:
        with self._lock:
            return self._running.get((job_id, attempt))

    def supervisors(self) -> list[Supervisor]:
        with self._lock:
            return list(self._running.values())

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait for running attempts to end; True when none is left."""
        for sup in self.supervisors():
            sup.join(timeout)
        return not any(sup.is_alive() for sup in self.supervisors())
