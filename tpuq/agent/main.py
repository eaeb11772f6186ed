"""The host agent: one per TPU host.

It assembles independent pieces — the executor (doorbells -> supervised attempts), the
scheduler pass and reaper (whichever agent holds the leader lease), small tickers for
heartbeat and recovery, the local socket, the metadata watcher — and owns the process:
signals, recovery at start, and the two-stage stop.
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import signal
import threading
import time
from typing import Any

from tpuq import localclient
from tpuq.agent import devices, holders, identity, libtpu
from tpuq.agent.executor import Executor
from tpuq.agent.localsock import LocalSocketServer, user_name
from tpuq.agent.metadata import MaintenanceWatcher, is_migration
from tpuq.agent.tickers import Ticker
from tpuq.scheduler.loop import Scheduler
from tpuq.settings import Settings
from tpuq.spec import JobSpec, SpecError
from tpuq.state import attempts, hosts, jobs, outage
from tpuq.state.attempts import Ending
from tpuq.state.db import Database
from tpuq.state.outage import is_outage
from tpuq.state.states import JobState, Outcome, StopRequest

log = logging.getLogger("tpuq.agent")


class AgentError(RuntimeError):
    """The agent cannot start; the message says what to do."""


def read_boot_id(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as e:
        raise AgentError(f"cannot read boot id from {path}: {e}") from None


def reset_signals() -> None:
    """Children inherit the signal mask and ignored signals across exec: start clean.

    A mask leaked from whatever launched the agent made user processes unkillable in
    dramatiq#465; nohup and some shells leave SIGHUP/SIGINT ignored.
    """
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGPIPE, signal.SIGTERM):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)


class StopSignals:
    """SIGINT/SIGTERM, delivered to the main loop instead of acted on in the handler.

    The handler only records the signal (Python also writes it to the wakeup pipe): a
    handler that took a lock, even Event.set(), could deadlock against the very main
    thread it interrupted.
    """

    def __init__(self) -> None:
        self.pending: list[int] = []
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)

    def install(self) -> StopSignals:
        signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, _frame: self.pending.append(signum))
        return self

    def wait(self, agent: Agent, timeout: float) -> None:
        """Sleep until a signal arrives or `timeout` passes; hand signals to the agent."""
        ready, _, _ = select.select([self._r], [], [], timeout)
        if ready:
            os.read(self._r, 512)
        while self.pending:
            self.pending.pop()
            agent.request_stop()


class Agent:
    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db
        self.name = settings.host
        self.boot_id = read_boot_id(settings.boot_id_file)
        chips = devices.discover_chips(settings.device_glob)
        if not chips:
            raise AgentError(f"no TPU chips found with device glob {settings.device_glob!r} "
                             "(set TPUQ_DEVICE_GLOB)")
        self.tpu_type = devices.detect_tpu_type(len(chips), settings.pci_dir,
                                                settings.tpu_type or None)
        if self.tpu_type is None and settings.metadata_url:
            from tpuq.agent.metadata import read_topology

            self.tpu_type = read_topology(settings.metadata_url).get("accelerator_type")
        self.chips = chips
        cannot = identity.check_agent_can(
            settings.run_as, [settings.home, settings.logs_dir, settings.checkpoints_dir])
        if cannot:
            raise AgentError(cannot)
        # the host name, not host:pid: a restarted agent resumes its own lease at once, and
        # only one agent per host name can run (the pid lock below)
        self.holder = self.name
        self.stopping = threading.Event()
        self.second_stop = threading.Event()
        self.executor = Executor(settings, db, boot_id=self.boot_id, chips=chips,
                                 tpu_type=self.tpu_type, on_change=self.wake_scheduler)
        self.scheduler = Scheduler(db, settings, self.holder, ring=self.ring)
        self.worker: Any = None  # the Celery worker, team deployment only
        self.ringer: Any = None  # the background ringer, team deployment only
        self.tickers: list[Ticker] = []  # started together once the agent is ready
        self.sched_ticker = Ticker("scheduler", settings.poll_s, self._schedule)
        self.sock: LocalSocketServer | None = None
        self.watcher = MaintenanceWatcher(settings.metadata_url or None, self.on_notice)
        # the maintenance notice in force, if any: the host takes no work until it passes
        self.notice: str | None = None
        self._pidlock: int | None = None

    # ---- wiring ------------------------------------------------------------------------
    def ring(self, host: str, job_id: int, attempt: int) -> None:
        """Tell `host` to start an assigned attempt (after the assignment committed).

        Embedded: the executor is in this process. Team: a `tpuq.run` message on the
        host's queue; if it is lost, the host's poll of its assigned jobs finds it.
        """
        if self.settings.embedded:
            if host == self.name:
                self.executor.ring(job_id, attempt)
            return
        from tpuq.queue import doorbell

        doorbell.ring_host(host, job_id, attempt)

    def wake_scheduler(self) -> None:
        """Chips were freed or this host changed: schedule now. When another agent leads,
        ring it, or the freed chips would wait for its next poll."""
        if self.ringer is None or self.scheduler.leading:
            self.sched_ticker.wake()
        else:
            self.ringer.ring_leader()

    def wake_all(self) -> None:
        """Something changed in the database (cancel, drain, hold...): look now."""
        self.sched_ticker.wake()
        for sup in self.executor.supervisors():
            sup.notify()

    def _schedule(self) -> None:
        if not self.stopping.is_set():
            self.scheduler.run_pass()

    # ---- start -------------------------------------------------------------------------
    def start(self) -> None:
        os.makedirs(self.settings.home, exist_ok=True)
        self._take_pidlock()
        if self.settings.run_as == "owner":
            libtpu.share_log_dir(self.settings.tpu_logs_dir)
        if not self.settings.embedded:
            from tpuq.queue.doorbell import Ringer

            self.ringer = Ringer().start()
        with self.db.write() as s:
            hosts.register(s, self.name, tpu_type=self.tpu_type,
                           chips=[c.index for c in self.chips], boot_id=self.boot_id,
                           agent_pid=os.getpid())
        self.recover()
        self._serve_socket()
        if not self.settings.embedded:
            from tpuq.queue.worker import HostWorker

            # one slot per chip (each a possible 1-chip job) plus room for rings
            self.worker = HostWorker(self, concurrency=len(self.chips) + 4).start()
            self._ship_logs()
        cfg = self.settings
        self.tickers += [
            self.sched_ticker,
            Ticker("reaper", max(cfg.lease_s / 3, 0.2), self.scheduler.reap),
            Ticker("heartbeat", cfg.heartbeat_s, self._heartbeat),
            Ticker("tpu-logs", 3600, lambda: libtpu.trim_tpu_logs(cfg.tpu_logs_dir)),
        ]
        for t in self.tickers:
            t.start()
        self.wake_scheduler()  # a host that just came up: the leader may have work for it
        self.watcher.start()
        log.info("agent on %s: %d chips (%s), tpu type %s, boot %s, database %s", self.name,
                 len(self.chips), ",".join(str(c.index) for c in self.chips),
                 self.tpu_type or "unknown", self.boot_id[:8], self.db.safe_url)

    def _serve_socket(self) -> None:
        """The local socket: submits and rings from this VM skip SQLAlchemy and Celery.

        Embedded, the CLI checked before that no other agent answers there. In the team
        deployment several agents may share a state directory (fake hosts on one machine):
        the first one serves it, and any of them does, since they share one database.
        """
        path = self.settings.socket_path
        if not self.settings.embedded and socket_has_agent(path, self.settings.deployment):
            log.info("another agent answers on %s; it takes this VM's submissions", path)
            return
        self.sock = LocalSocketServer(path, self.handle_local).start()

    def _take_pidlock(self) -> None:
        """One agent per state directory: a second one would fight over the same chips."""
        path = os.path.join(self.settings.home, f"agent-{self.name}.pid")
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.read(fd, 32).decode().strip() or "?"
            os.close(fd)
            raise AgentError(f"an agent for host {self.name} is already running "
                             f"(pid {other}, lock {path})") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._pidlock = fd

    def recover(self) -> None:
        """Attempts this host owned before the agent (re)started are over: requeue them."""
        # Orphans die before their jobs are requeued. Found by environment first (also one
        # whose pid never reached the database), then by the pid recorded in this boot
        # (also one that exec'd without tpuq's variables).
        orphans = holders.find_attempt_processes(self.name, self.settings.checkpoints_dir)
        if orphans:
            log.warning("killing orphans of earlier attempts: %s",
                        "; ".join(holders.describe(p) for p in orphans))
            holders.kill_and_wait([(p.pid, p.start_ticks) for p in orphans], timeout=10.0)
        with self.db.write() as s:
            rebooted = attempts.requeue_rebooted(s, self.name, self.boot_id)
            same_boot = attempts.active_on_host(s, self.name)
        if rebooted:
            log.warning("requeued after reboot or restart: jobs %s", rebooted)
        for job, att in same_boot:
            if att.pid and att.proc_start and holders.is_same_process(att.pid, att.proc_start):
                log.warning("killing orphan of job %s (pid %s)", job.id, att.pid)
                holders.kill_and_wait([(att.pid, att.proc_start)], timeout=10.0)
            with self.db.write() as s:
                attempts.finish(s, job.id, att.number, self.name,
                                Ending(Outcome.PREEMPTED, "agent restarted"))
        foreign = self.executor.clear_holders(tuple(c.index for c in self.chips))
        if foreign:
            reason = "TPU held by " + "; ".join(holders.describe(p) for p in foreign)
            with self.db.write() as s:
                hosts.set_busy(s, self.name, reason)
            log.warning("%s: no job starts until it exits", reason)
        else:
            libtpu.clean_stale_lock(self.settings.libtpu_lockfile, holders_alive=False)

    def _ship_logs(self) -> None:
        """Team deployment: job output into Redis streams, for `tpuq logs` anywhere."""
        from tpuq.queue.logstream import LogShipper

        shipper = LogShipper(self.settings.broker_url)

        def tick() -> None:
            for sup in self.executor.supervisors():
                w = sup.work
                shipper.ship(w.job_id, w.attempt, self.executor.log_path(w.job_id, w.attempt))
            shipper.ship_unfinished()

        def final(sup: Any) -> None:
            w = sup.work
            shipper.ship(w.job_id, w.attempt, self.executor.log_path(w.job_id, w.attempt),
                         final=True)

        self.executor.end_hooks.append(final)
        self.tickers.append(Ticker("log-shipper", 0.5, tick))

    def _heartbeat(self) -> None:
        with self.db.write() as s:
            hosts.heartbeat(s, self.name)
        if self.notice is None:
            # only a foreign holder's busy flag clears itself; a notice's waits for the
            # metadata server (or for the reboot, which starts a fresh agent)
            self.executor.check_busy()
        else:
            self._check_notice_over()
        if not self.stopping.is_set():
            self.executor.poll_assigned()

    # ---- local requests (the CLI on this VM) -----------------------------------------------
    def handle_local(self, req: dict[str, Any], uid: int) -> dict[str, Any]:
        op = req.get("op")
        if op == "ping":
            return {"ok": True, "pid": os.getpid(), "host": self.name,
                    "deployment": self.settings.deployment}
        if req.get("deployment") not in (None, self.settings.deployment):
            return {"ok": False, "other_deployment": True,
                    "error": f"this agent serves {self.settings.deployment}"}
        if op == "wake":
            self.announce()
            return {"ok": True}
        if op == "submit":
            return self._local_submit(req, uid)
        return {"ok": False, "error": f"unknown request {op!r}"}

    def announce(self) -> None:
        """The queue changed: look here now and, in the team deployment, ring every agent
        (the leader may be elsewhere; a cancelled job may run elsewhere)."""
        self.wake_all()
        if self.ringer is not None:
            self.ringer.ring_all()

    def _local_submit(self, req: dict[str, Any], uid: int) -> dict[str, Any]:
        try:
            spec = JobSpec.from_dict(req["spec"])
        except (SpecError, TypeError, KeyError) as e:
            return {"ok": False, "error": str(e)}
        if uid not in (0, os.getuid()):
            spec.owner = user_name(uid)  # the kernel says who asked, not the request
        try:
            with self.db.write() as s:
                job_id = jobs.submit(s, spec, held=bool(req.get("held")))
        except SpecError as e:  # a shape no registered host can give
            return {"ok": False, "error": str(e)}
        except Exception as e:
            if not is_outage(e):
                raise
            return {"ok": False, "unavailable": True, "error": outage.describe(e)}
        self.wake_scheduler()  # only the leader has anything to do with a new job
        return {"ok": True, "id": job_id}

    # ---- notices and stopping -------------------------------------------------------------
    def on_notice(self, reason: str) -> None:
        """The host is going away (maintenance, preemption): checkpoint everything."""
        if is_migration(reason):
            log.info("%s: live migration keeps processes running; nothing to do", reason)
            return
        delay = self._until_window(reason)
        if delay > 0:
            # a window hours away: let jobs run, and ask them to checkpoint shortly before
            log.warning("%s: preempting jobs in %.0fs", reason, delay)
            timer = threading.Timer(delay, self._notice_now, args=(reason,))
            timer.daemon = True
            timer.start()
            return
        self._notice_now(reason)

    def _until_window(self, reason: str) -> float:
        """Seconds until `maintenance_lead_s` before an announced window; 0 = act now."""
        prefix = "upcoming maintenance "
        if not reason.startswith(prefix) or " at " not in reason:
            return 0.0
        from datetime import datetime

        try:
            start = datetime.fromisoformat(reason.rsplit(" at ", 1)[1].replace("Z", "+00:00"))
        except ValueError:
            return 0.0
        return max(0.0, start.timestamp() - time.time() - self.settings.maintenance_lead_s)

    def _notice_now(self, reason: str) -> None:
        if self.stopping.is_set():
            return
        log.warning("notice: %s; preempting running jobs", reason)
        self.notice = reason
        with self.db.write() as s:
            hosts.set_busy(s, self.name, f"notice: {reason}")
        self.preempt_all(f"host notice: {reason}")

    def _check_notice_over(self) -> None:
        """A maintenance event that is NONE again without a reboot (cancelled, or the VM
        survived it) ends the notice: the host takes work again."""
        notice = self.notice
        if notice is None or not notice.startswith("maintenance-event ") \
                or self.watcher.last_event != "NONE" \
                or self.stopping.is_set():
            return
        self.notice = None
        self.executor.accepting = True
        with self.db.write() as s:
            hosts.set_busy(s, self.name, None)
        log.info("maintenance event over (%s); taking work again", notice)
        self.wake_scheduler()

    def preempt_all(self, why: str) -> None:
        self.executor.accepting = False
        with self.db.write() as s:
            for job, att in attempts.active_on_host(s, self.name):
                if job.state == JobState.ASSIGNED.value:
                    attempts.finish(s, job.id, att.number, self.name,
                                    Ending(Outcome.PREEMPTED, f"{why} before start"))
                else:
                    jobs.request_stop(s, job.id, "agent", StopRequest.PREEMPT, why=why)
        for sup in self.executor.supervisors():
            sup.notify()

    def request_stop(self) -> None:
        """First signal: stop taking work, preempt jobs; second: kill them now."""
        if self.stopping.is_set():
            self.second_stop.set()
            for sup in self.executor.supervisors():
                sup.kill_now()
            return
        self.stopping.set()

    def run_until_stopped(self, signals: StopSignals) -> None:
        """The main thread: act on stop signals until every attempt has ended."""
        while not self.stopping.is_set():
            signals.wait(self, timeout=1.0)
        log.info("stopping: jobs get their preemption signal and grace period")
        with self.db.write() as s:
            hosts.stopped(s, self.name)
        self.preempt_all("agent stopping")
        while not self.executor.wait_idle(timeout=0):
            signals.wait(self, timeout=0.1)  # a second signal kills the jobs at once
        self.shutdown()

    def shutdown(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        if self.ringer is not None:
            self.ringer.stop()
        self.watcher.stop()
        for t in self.tickers:
            t.stop()
        self.scheduler.resign()
        if self.sock is not None:
            self.sock.close()
        self.db.dispose()
        log.info("agent stopped")


def socket_has_agent(path: str, deployment: str | None = None) -> bool:
    """An agent answers on `path` (serving `deployment`, when one is named)."""
    reply = localclient.ping(path)
    return reply is not None and deployment in (None, reply.get("deployment"))
