"""The host agent: one per TPU host. This module wires its pieces and runs its stop sequence.

The pieces, each in a module named for it: the executor (assigned attempts -> supervised
processes), the scheduler pass and reaper (whichever agent holds the leader lease),
tickers for heartbeat and recovery, the local socket and its API (local/api.py), the
metadata watcher and its notice policy (gce/notices.py), start-up recovery (recovery.py),
signals (signals.py) and the pid lock (pidlock.py).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

from tpuq import announce, checkpoints, gcpause, jobenv, localclient
from tpuq.agent import handover, pidlock, recovery
from tpuq.agent.attempts import identity
from tpuq.agent.attempts.executor import Executor
from tpuq.agent.duties.logkeeper import LogKeeper
from tpuq.agent.duties.notifier import Notifier
from tpuq.agent.duties.tickers import Ticker
from tpuq.agent.errors import AgentError, HostUnfit
from tpuq.agent.gce import topology
from tpuq.agent.gce.metadata import MaintenanceWatcher, preempted_now, read_topology
from tpuq.agent.gce.notices import NoticePolicy
from tpuq.agent.local.api import LocalApi
from tpuq.agent.local.server import LocalSocketServer
from tpuq.agent.reserve import Reserve
from tpuq.agent.signals import StopSignals
from tpuq.agent.teamlink import TeamLink
from tpuq.agent.tpu import devices, libtpu
from tpuq.agent.tpu.probes import HostShapes
from tpuq.scheduler.passes import Scheduler
from tpuq.scheduler.reaper import Reaper
from tpuq.settings import Settings
from tpuq.state import attempts, gangs, hosts, jobs, outage, queries
from tpuq.state.attempts import Ending
from tpuq.state.db import SCHEMA_HEAD, Database
from tpuq.state.states import JobState, Outcome, StopRequest

log = logging.getLogger("tpuq.agent")
# SQLite: how often the agent copies the write-ahead log into the database (its commits
# leave that to it); at full turnover about a thousand pages a second pass through it
WAL_CHECKPOINT_S = 1.0

__all__ = ["Agent", "AgentError", "read_boot_id", "socket_has_agent"]


def read_boot_id(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as e:
        raise AgentError(f"cannot read boot id from {path}: {e}") from None


def find_chips(settings: Settings) -> list[devices.Chip]:
    """This host's chips (a TPU7x chip's two vfio groups as one), or HostUnfit saying
    what to change: chips tpuq does not know, or TPU chips without device files."""
    functions = devices.pci_functions(settings.pci_dir)
    chips = devices.discover_chips(settings.device_glob)
    if not settings.tpu_type:
        groups = [c.index for c in chips if any("/vfio/" in p for p in c.paths)]
        refused = devices.refusal(functions, groups)
        if refused:
            raise HostUnfit(refused)
    chips = devices.group_by_pci(chips, functions)
    if chips:
        return chips
    tpus = [f for f in functions if f.generation is not None]
    if tpus:
        gen = tpus[0].generation or ""
        raise HostUnfit(
            f"this VM has {len({f.base for f in tpus})} {gen} TPU chips on its PCI bus but no "
            f"TPU device files ({settings.device_glob!r}): its OS image does not match its TPU "
            f"generation. Recreate the VM with the {gen} software version "
            f"({devices.IMAGES.get(gen, 'see the Cloud TPU docs')}), or set TPUQ_DEVICE_GLOB "
            "if its device files are elsewhere")
    raise AgentError(f"no TPU chips found with device glob {settings.device_glob!r} "
                     "(set TPUQ_DEVICE_GLOB)")


def warn_without_hugepages(path: str) -> bool:
    """Warn (True) when transparent hugepages are not `always`: the TPU runtime's
    start-up and shutdown are then much slower on v5e and later (jax cloud_tpu_init.py),
    and chips take longer to be free after a kill."""
    try:
        with open(path) as f:
            mode = f.read().strip()
    except OSError:
        return False  # not Linux, or no such knob: nothing to say
    if "[always]" in mode:
        return False
    log.warning("transparent hugepages are %r, not always: TPU start-up and shutdown are much "
                "slower on v5e and later; set them: echo always | sudo tee %s (the startup "
                "script does it at boot)", mode, path)
    return True


def agent_home(settings: Settings) -> hosts.AgentHome:
    """What makes this agent itself for a host name's row: its machine (systemd's machine id, stable
    across reboots, new on a re-created VM) and its state directory."""
    try:
        with open(settings.machine_id_file) as f:
            machine = f.read().strip()
    except OSError as e:
        raise AgentError(f"cannot read the machine id from {settings.machine_id_file}: {e} "
                         "(set TPUQ_MACHINE_ID_FILE)") from None
    if not machine:
        raise AgentError(f"{settings.machine_id_file} is empty (set TPUQ_MACHINE_ID_FILE)")
    return hosts.AgentHome(machine[:64], os.path.realpath(settings.home))


class Agent:
    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db
        self.name = settings.host
        self.boot_id = read_boot_id(settings.boot_id_file)
        self.home = agent_home(settings)
        # every write of the host row names this start of the agent (state/hosts.py)
        self.held = hosts.Held(self.name, uuid.uuid4().hex)
        chips = find_chips(settings)
        # the type the PCI bus shows: real TPU chips, which `auto` shape probes ask JAX about
        self.pci_type = devices.detect_tpu_type(len(chips), settings.pci_dir)
        self.tpu_type = settings.tpu_type or self.pci_type
        topo = read_topology(settings.metadata_url) if settings.metadata_url else None
        if self.tpu_type is None and topo:
            self.tpu_type = topo.get("accelerator_type")
        self.seat = topology.seat_of(settings, topo)
        self.chips = chips
        shared = [settings.checkpoint_root] if settings.checkpoint_root and \
            not checkpoints.is_url(settings.checkpoint_root) else []
        cannot = identity.check_agent_can(
            settings.run_as, [settings.home, settings.logs_dir, settings.checkpoints_dir,
                              *shared])
        if cannot:
            raise AgentError(cannot)
        self.stopping = threading.Event()
        self.handing_over = False
        self.lost_name = False  # another agent holds this host name now: stop, touch nothing
        # why this agent leads, assigns and starts nothing: the database moved past its code
        self.too_old: str | None = None
        self.executor = Executor(settings, db, self.held, boot_id=self.boot_id, chips=chips,
                                 tpu_type=self.tpu_type, on_change=self.wake_scheduler)
        self.executor.gang_news = self.announce
        self.executor.notice_source = self.platform_notice
        self.shapes = HostShapes(self.executor, settings, devices.generation_of(self.tpu_type),
                                 self._offer, real_tpu=self.pci_type is not None)
        coordinator = topology.multislice_coordinator(topo)
        if coordinator is not None:  # MEGASCALE_* in tpu-env: each job sees its slice alone
            self.executor.host_env = jobenv.single_slice_env(coordinator)
        self.executor.in_slice = self.seat is not None
        # leader lease holder = the host name, not host:pid: a restarted agent resumes its
        # own lease at once, and only one agent holds a host name (hosts.register)
        # what a pass gives this host starts in the pass's own transaction (one commit)
        self.scheduler = Scheduler(db, settings, self.name, dispatch=self.dispatch,
                                   on_lead=lambda: self.sched_ticker.wake(),
                                   own=self.executor)
        self.reaper = Reaper(db, settings, self.scheduler.has_lease)
        self.waker: Any = None  # wakes other agents through the broker, team deployment only
        # consumer, wake-up listener, log shipping, broker accounts: team deployment only
        self.team = None if settings.embedded else TeamLink(
            settings, db, self.executor, self, self.wake_all, self.stopping.is_set)
        self._disk_low_said: str | None = ""  # what the host row says ("": not yet written)
        self.tickers: list[Ticker] = []  # started together once the agent is ready
        self.sched_ticker = Ticker("scheduler", settings.poll_s, self._schedule)
        self.lead_ticker = Ticker("leader", settings.leader_lease_s / 3,
                                  self.scheduler.keep_lease)
        self.sock: LocalSocketServer | None = None
        self.announced: Path | None = None  # this agent's note (announce.py)
        self.api = LocalApi(settings, db, on_submit=self.wake_scheduler, on_change=self.announce,
                            free_tpu=lambda: self.executor.free_tpu().as_dict(),
                            terminals=self.executor.terminals)
        self.notices = NoticePolicy(
            lead_s=settings.maintenance_lead_s, take_out=self._take_out,
            restate=self._mark_busy, give_back=self._give_back, stopping=self.stopping)
        self.watcher = MaintenanceWatcher(settings.metadata_url or None, self.notices.on_change)
        self._pidlock: int | None = None
        self.reserve = Reserve(os.path.join(settings.home, "reserve"))
        self.logkeeper = LogKeeper(
            settings, db, self.name, self.executor.dirs.logs,
            live=lambda: [(sup.spec.job_id, sup.spec.attempt)
                          for sup in self.executor.supervisors()],
            drop_stream=None if self.team is None else self.team.drop_stream)

    # ---- who is told what -----------------------------------------------------------------
    def dispatch(self, host: str, job_id: int, attempt: int) -> None:
        """Tell `host` to start an assigned attempt (after the assignment committed).

        This host (the leader's own, and the only one of the embedded deployment): the
        executor is in this process. Another host: a `tpuq.run` message on that host's
        queue; if it is lost, the host's poll of its assigned jobs finds it. A message to
        itself would cost the leader a publish, a delivery and an acknowledgement through
        the broker per job (a quarter of its CPU per job at full turnover) for the same
        call.
        """
        if host == self.name:
            self.executor.start_attempt(job_id, attempt) or \
                self.executor.start_gang(job_id, attempt)
            return
        if self.settings.embedded:
            return
        from tpuq.queue import doorbell

        doorbell.start_on_host(host, job_id, attempt)

    def wake_scheduler(self) -> None:
        """Chips were freed or this host changed: schedule now. When another agent leads,
        wake it, or the freed chips would wait for its next poll."""
        if self.waker is None or self.scheduler.leading:
            self.sched_ticker.wake()
        else:
            self.waker.wake_leader()

    def wake_all(self) -> None:
        """Something changed in the database (cancel, drain, hold...): look now."""
        self.sched_ticker.wake()
        for sup in self.executor.supervisors():
            sup.notify()

    def announce(self) -> None:
        """The queue changed: look here now and, in the team deployment, wake every agent
        (the leader may be elsewhere; a cancelled job may run elsewhere)."""
        self.wake_all()
        if self.waker is not None:
            self.waker.wake_agents()

    # ---- what the Celery tasks ask (tpuq.queue.tasks.Host) ----------------------------------
    def run_attempt(self, job_id: int, attempt: int) -> str:
        sup = (self.executor.start_attempt(job_id, attempt)
               or self.executor.supervisor(job_id, attempt)  # a late doorbell: join it
               or self.executor.start_gang(job_id, attempt))
        if sup is None:
            return "stale or duplicate doorbell"
        sup.join()
        return sup.ending.outcome.value if sup.ending else "fenced"

    def wake_if_leading(self) -> None:
        if self.scheduler.leading:
            self.wake_scheduler()

    def take_lead(self) -> None:
        if not self.stopping.is_set():
            self.lead_ticker.wake()

    def slots(self) -> dict[str, Any]:
        chips: dict[str, str | None] = {str(c.index): None for c in self.chips}
        for sup in self.executor.supervisors():
            for c in sup.spec.chips:
                chips[str(c)] = f"job {sup.spec.job_id} attempt {sup.spec.attempt}"
        return {"host": self.name, "tpu_type": self.tpu_type, "chips": chips}

    # ---- start -------------------------------------------------------------------------
    def start(self) -> None:
        # what the agent writes (database, logs, locks) is its own; jobs get 022 back
        os.umask(0o077)
        try:
            self.executor.dirs.prepare(self.settings.home)
        except OSError as e:
            raise AgentError(f"cannot make the directories jobs need: {e} (check "
                             "TPUQ_HOME and TPUQ_CHECKPOINT_ROOT)") from None
        self._pidlock = pidlock.take(self.settings.home, self.name)
        self.reserve.hold()
        outage.disk_full_hook = self.reserve.release
        if self.settings.run_as == "owner":
            libtpu.share_log_dir(self.settings.tpu_logs_dir)
        if not self.settings.embedded:
            from tpuq.queue.doorbell import Waker

            self.waker = Waker().start()
        try:
            with self.db.write() as s:
                registered_at = queries.now(s)  # recovery leaves what is assigned since
                took_over = hosts.register(
                    s, self.held, self.home, tpu_type=self.tpu_type,
                    chips=[c.index for c in self.chips], boot_id=self.boot_id,
                    agent_pid=os.getpid(), stale_s=self.settings.host_stale_s,
                    seat=self.seat, unavailable=self.shapes.initial(),
                    checkpoint_root=self.settings.checkpoint_root)
        except hosts.NameTaken as e:
            raise AgentError(str(e)) from None
        if took_over:
            log.warning("%s", took_over)
        self.executor.keepers.start()
        warn_without_hugepages(self.settings.thp_file)
        recovery.recover(self.executor, self.boot_id, registered_at)
        self.shapes.tick()  # before any work: the shapes this host offers are proven
        self._serve_socket()
        if self.team is not None:
            self.tickers += self.team.start()
        cfg = self.settings
        self.tickers += [
            self.lead_ticker,
            self.sched_ticker,
            # a dead host's job runs elsewhere within its lease and a few seconds
            Ticker("reaper", max(min(cfg.lease_s / 3, 1.0), 0.2), self._reap),
            Ticker("heartbeat", cfg.heartbeat_s, self._heartbeat),
            Ticker("tpu-logs", 3600, lambda: libtpu.trim_tpu_logs(cfg.tpu_logs_dir)),
            Ticker("notifier", cfg.notify_poll_s, Notifier(cfg, self.db, self.name).run_once),
            # a changed Python, JAX or libtpu is noticed within 15 heartbeats (30 s)
            Ticker("shape-probes", 15 * cfg.heartbeat_s, self.shapes.tick),
            Ticker("logs", cfg.log_check_s, self.logkeeper.run_once),
        ]
        if self.db.checkpoint_in_background():  # SQLite: no job start waits for the fsync
            self.tickers.append(Ticker("checkpoint", WAL_CHECKPOINT_S, self.db.checkpoint))
        for t in self.tickers:
            t.start()
        self.wake_scheduler()  # a host that just came up: the leader may have work for it
        self.watcher.start()
        gcpause.serving()  # what the start built lives as long as the agent
        log.info("agent on %s: %d chips (%s), tpu type %s, boot %s, database %s%s", self.name,
                 len(self.chips), ",".join(str(c.index) for c in self.chips),
                 self.tpu_type or "unknown", self.boot_id[:8], self.db.safe_url,
                 f", worker {self.seat.worker} of {self.seat.tpu_type} slice {self.seat.slice}"
                 if self.seat else "")

    def _serve_socket(self) -> None:
        """The local socket: submits and wake-ups from this VM skip SQLAlchemy and Celery.

        Embedded, the CLI checked before that no other agent answers there. In the team
        deployment several agents may share a state directory (fake hosts on one machine):
        the first one serves it, and any of them does, since they share one database.
        """
        path = self.settings.socket_path
        if not self.settings.embedded and socket_has_agent(path, self.settings.deployment):
            log.info("another agent answers on %s; it takes this VM's submissions", path)
            return
        self.sock = LocalSocketServer(
            path, self.api.handle, self.api.attach, connections=self.settings.agent_connections,
            per_user=self.settings.agent_connections_per_user).start()
        self.announced = announce.publish(self.settings)
        if self.announced is None:
            log.debug("not announced: %s is not writable", self.settings.announce_dir)

    def _reap(self) -> None:
        if self.reaper.reap():
            self.sched_ticker.wake()  # the requeued jobs go elsewhere now, not next poll

    def _schedule(self) -> None:
        if not self.stopping.is_set():
            self.scheduler.run_pass()

    def _heartbeat(self) -> None:
        disk_low = self.logkeeper.disk_low()
        with self.db.write() as s:
            mine = self.held.heartbeat(s)
            if mine and disk_low != self._disk_low_said:  # a write only when it changes
                self.held.set_disk_low(s, disk_low)
        if mine:
            self._disk_low_said = disk_low
        if not mine:
            self._lose_name()
            return
        self._check_schema()
        self.reserve.hold()  # back, once the disk has room again
        notices = self.notices.reason
        if notices is None:
            # only a foreign holder's busy flag clears itself; a notice's waits for the
            # metadata server (or for the reboot, which starts a fresh agent)
            self.executor.check_busy()
        else:
            self._mark_busy(notices)  # again: a write lost to a race or an outage heals
        if not self.stopping.is_set():
            self.executor.poll_assigned()

    def _check_schema(self) -> None:
        """A newer release's `tpuq db upgrade` may have moved the database past this
        code. If the schema no longer admits it (state/versions.py), this agent stops
        leading, assigning and starting jobs for good; the jobs it runs go on, and a newer
        agent adopts them (SIGUSR2). `tpuq status` says why this host gets no work."""
        if self.too_old:
            return
        why = self.db.schema().too_new_for(SCHEMA_HEAD, self.db.safe_url)
        if why is None:
            return
        self.too_old = why
        log.error("%s. This agent no longer leads, assigns or starts jobs; the %d it runs go "
                  "on until a newer agent adopts them (kill -USR2 %d hands them over)",
                  why, len(self.executor.supervisors()), os.getpid())
        self.executor.accepting = False
        self.scheduler.bar(why)

    # ---- notices: what taking the host out of service and giving it back mean -------------
    def platform_notice(self) -> str | None:
        """The notice standing for this host now, asked when an attempt the agent sent
        no stop ends: one in force, or the metadata server saying, asked now, that the VM
        is being preempted (the platform's SIGTERM can come before the next poll, and a
        job that caught it and saved exits 0)."""
        standing = self.notices.reason
        if standing is not None or not self.settings.metadata_url:
            return standing
        return "instance preempted" if preempted_now(self.settings.metadata_url) else None


    def _take_out(self, notices: str) -> None:
        self._mark_busy(notices)
        self.preempt_all(f"host notice: {notices}")

    def _offer(self, unavailable: dict[str, str] | None) -> None:
        """The shapes this host does not offer (tpu/probes.py), on its row; then schedule."""
        with self.db.write() as s:
            self.held.set_unavailable(s, unavailable)
        self.wake_scheduler()

    def _mark_busy(self, notices: str) -> None:
        with self.db.write() as s:
            self.held.set_busy(s, f"notice: {notices}")

    def _give_back(self) -> None:
        self.executor.accepting = self.too_old is None
        with self.db.write() as s:
            self.held.set_busy(s, None)
        self.wake_scheduler()

    # ---- stopping ------------------------------------------------------------------------
    def _lose_name(self) -> None:
        """The host row is no longer this agent's: another agent took the name over (this
        one was silent past TPUQ_HOST_STALE_S) or an admin forgot the host. Whatever runs
        here may already run elsewhere: stop it now and write nothing about the host."""
        if self.lost_name:
            return
        log.error("host name %s is no longer this agent's (taken over by another agent, or "
                  "forgotten by an admin): killing its jobs and stopping", self.name)
        self.lost_name = True
        self.executor.accepting = False
        self.stopping.set()

    def preempt_all(self, why: str) -> None:
        self.executor.accepting = False
        with self.db.write() as s:
            mine: list[tuple[int, int, str | None, str, str]] = [
                (job.id, att.number, self.name, job.state, why)
                for job, att in attempts.active_on_host(s, self.name)]
            # a slice job with a worker here: the notice stops the whole gang (its job
            # row is fenced on the slice, so the attempt alone guards it)
            mine += [(job_id, attempt, None, state, f"{why} (worker {worker}, {self.name})")
                     for job_id, attempt, worker, state in gangs.active_on_host(s, self.name)]
            for job_id, attempt, host, state, reason in mine:
                if state == JobState.ASSIGNED.value:
                    attempts.finish(s, job_id, attempt, host,
                                    Ending(Outcome.PREEMPTED, f"{reason} before start"),
                                    retry_backoff_s=self.settings.retry_backoff_s)
                else:
                    jobs.request_stop(s, job_id, "agent", StopRequest.PREEMPT, why=reason)
        for sup in self.executor.supervisors():
            sup.notify()

    def on_signal(self, signum: int) -> None:
        """SIGUSR2: hand over. Otherwise a stop: first signal, stop taking work and preempt
        jobs; second, kill them now."""
        if signum == signal.SIGUSR2:
            self.handing_over = True
            self.stopping.set()
            return
        if self.stopping.is_set() and not self.handing_over:
            for sup in self.executor.supervisors():
                sup.kill_now()
            return
        self.stopping.set()

    def run_until_stopped(self, signals: StopSignals) -> int:
        """The main thread: act on signals until every attempt has ended (or, handing
        over, until the supervisors let go of them). The agent's exit status."""
        while not self.stopping.is_set():
            signals.wait(self.on_signal, timeout=1.0)
        if self.handing_over:
            self._hand_over()
            return 0
        if self.lost_name:
            for sup in self.executor.supervisors():
                sup.kill_now()
            self.executor.wait_idle(timeout=10.0)
            self.shutdown()
            return 1
        log.info("stopping: jobs get their preemption signal and grace period")
        with self.db.write() as s:
            self.held.stopped(s)
        self.preempt_all("agent stopping")
        while not self.executor.wait_idle(timeout=0):
            signals.wait(self.on_signal, timeout=0.1)  # a second signal kills jobs at once
        self.shutdown()
        return 0

    def _hand_over(self) -> None:
        """Leave every running job with its keeper and go: the next agent adopts them
        (handover.py). An upgrade costs the jobs nothing."""
        handover.hand_over(self.executor, self.held, self.settings.handover_s)
        self.shutdown()

    def shutdown(self) -> None:
        if self.team is not None:
            self.team.stop()
        self.watcher.stop()
        for t in self.tickers:
            t.stop()
        # hand the lease back and say so: another agent leads now, not a lease later
        # (unless the name, and with it the lease's holder name, is another agent's now)
        if not self.lost_name and self.scheduler.resign() and self.waker is not None:
            self.waker.offer_leadership()
        if self.waker is not None:
            self.waker.stop()  # what it was asked to send goes out first
        self.executor.keepers.stop()  # the server only: keepers outlive it
        if self.sock is not None:
            announce.withdraw(self.announced)
            self.sock.close()
        self.db.dispose()
        log.info("agent stopped")


def socket_has_agent(path: str, deployment: str | None = None) -> bool:
    """An agent answers on `path` (serving `deployment`, when one is named)."""
    reply = localclient.ping(path)
    return reply is not None and deployment in (None, reply.deployment)
