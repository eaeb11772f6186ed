"""At agent start: pick up what this host's earlier agent left, and make the TPU ours.

For each attempt the database says is active here:
  - its keeper still runs (an agent crash or upgrade): adopt it, the job goes on;
  - its keeper wrote how it ended (it ended while no agent was here): record that, once;
  - neither, and the host rebooted since: requeue it at once;
  - neither on this boot (the keeper itself was killed): kill what is left of it,
    verified by pid and start time and by the environment every attempt's process
    carries, and requeue it.
A keeper whose attempt is no longer this host's (the lease ran out meanwhile and the
job went elsewhere) has its job killed. Then any process still holding the TPU that tpuq
did not start marks the host busy; otherwise a stale libtpu lock is removed.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tpuq.agent.attempts import outcome
from tpuq.agent.attempts.executor import Executor
from tpuq.agent.attempts.spec import AttemptSpec
from tpuq.agent.keeper.link import KeeperGone, adopt, clock, live_keepers
from tpuq.agent.keeper.messages import Collected, Ended, Kill, Status
from tpuq.agent.tpu import holders, libtpu
from tpuq.state import attempts, gangs, queries
from tpuq.state.attempts import Ending
from tpuq.state.states import Outcome

log = logging.getLogger("tpuq.agent")


def recover(executor: Executor, boot_id: str, registered_at: float) -> None:
    """`registered_at`: when this agent registered its host (database clock). Attempts
    assigned since are new work for this agent, not what an earlier one left: the leader
    may assign to the host as soon as it is registered, while this still runs."""
    settings, db, name = executor.settings, executor.db, executor.name
    backoff, host_retries = settings.retry_backoff_s, settings.host_error_retries
    with db.read() as s:
        active = attempts.active_on_host(s, name, assigned_before=registered_at)
        now = queries.now(s)
    adopted: set[tuple[int, int]] = set()
    lost = []
    for job, att in active:
        key = (job.id, att.number)
        if att.boot_id == boot_id:
            found = adopt(executor.keepers.run_dir, *key)
            if found is not None:
                executor.supervise(_spec(job, att, now), adopted=found)
                adopted.add(key)
                continue
        ended = executor.read_exit(job.id, att.number)
        if ended is not None:
            log.warning("job %s attempt %s ended while no agent was here: recording it", *key)
            end = outcome.ending_of(ended, att.log_path or "")
            progress = outcome.last_progress(outcome.progress_path(att.log_path or ""))
            outcome.record(db, job.id, att.number, name, end, progress=progress,
                           retry_backoff_s=backoff, host_retries=host_retries)
            continue
        lost.append((job, att))
    _stop_strays(executor, adopted)
    _kill_orphans(executor, adopted, lost)
    with db.write() as s:
        rebooted = attempts.requeue_rebooted(s, name, boot_id, assigned_before=registered_at,
                                             retry_backoff_s=backoff,
                                             host_retries=host_retries)
    if rebooted:
        log.warning("requeued after reboot or restart: jobs %s", rebooted)
    for job, att in lost:
        if att.boot_id == boot_id:
            with db.write() as s:
                attempts.finish(s, job.id, att.number, name,
                                Ending(Outcome.PREEMPTED, "agent restarted"),
                                retry_backoff_s=backoff)
    _end_gang_tasks(executor, registered_at)
    foreign = executor.clear_holders(tuple(executor.chips))
    if foreign:
        reason = holders.held_by(foreign)
        with db.write() as s:
            executor.held.set_busy(s, reason)
        log.warning("%s: no job starts until it exits", reason)
    elif not adopted:
        libtpu.clean_stale_lock(settings.libtpu_lockfile, holders_alive=False)


def _end_gang_tasks(executor: Executor, registered_at: float) -> None:
    """Slice jobs' tasks this host ran are not adopted (their keepers were stopped above
    as strays): the worker is recorded as lost, which stops and requeues the gang; on
    worker 0, whose agent held the job's lease, the attempt ends now."""
    db, backoff = executor.db, executor.settings.retry_backoff_s
    with db.read() as s:
        mine = gangs.active_on_host(s, executor.name, assigned_before=registered_at)
    for job_id, attempt, worker, _ in mine:
        why = f"worker {worker} ({executor.name}): its agent restarted"
        with db.write() as s:
            gangs.ended(s, job_id, attempt, worker, Ending(Outcome.LOST, why, untouched=True))
            if worker == 0:
                attempts.finish(s, job_id, attempt, None, Ending(Outcome.LOST, why),
                                retry_backoff_s=backoff,
                                host_retries=executor.settings.host_error_retries)
            else:
                gangs.stop_gang(s, job_id, attempt, f"{why}: stopping the gang")
        log.warning("job %s attempt %s: %s", job_id, attempt, why)


def _spec(job: Any, att: Any, now: float) -> AttemptSpec:
    """The attempt as the supervisor needs it, from the database (adoption)."""
    return AttemptSpec.of(job, job.id, att.number, chips=tuple(att.chips),
                          lease_until=clock(),  # renewed at once on adoption
                          elapsed_s=max(0.0, now - (att.started_at or now)),
                          started_over=att.started_over)


def _stop_strays(executor: Executor, adopted: set[tuple[int, int]]) -> None:
    """Keepers of attempts that are no longer this host's: their jobs must not run on."""
    for key in live_keepers(executor.keepers.run_dir):
        if key in adopted:
            continue
        found = adopt(executor.keepers.run_dir, *key)
        if found is None:
            continue
        link, status = found
        if not isinstance(status, Status) or status.ended is None:
            log.warning("job %s attempt %s is no longer this host's: killing it", *key)
            link.send(Kill())
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                try:
                    if any(isinstance(m, Ended) for m in link.events()):
                        break
                except KeeperGone:
                    break
                time.sleep(0.05)
        link.send(Collected())
        link.close()


def _kill_orphans(executor: Executor, adopted: set[tuple[int, int]], lost: list[Any]) -> None:
    """Orphans die before their jobs are requeued: found by environment (also one whose
    pid never reached the database), then by the pid recorded in this boot (also one
    that exec'd without tpuq's variables). Adopted attempts' processes are not orphans."""
    found = [p for p in holders.find_attempt_processes(executor.name, executor.dirs.marks)
             if _attempt_of(p) not in adopted]
    if found:
        log.warning("killing orphans of earlier attempts: %s",
                    "; ".join(holders.describe(p) for p in found))
        holders.kill_and_wait([(p.pid, p.start_ticks) for p in found],
                              timeout=executor.settings.chip_release_s)
    for job, att in lost:
        if att.pid and att.proc_start and holders.is_same_process(att.pid, att.proc_start):
            log.warning("killing orphan of job %s (pid %s)", job.id, att.pid)
            holders.kill_and_wait([(att.pid, att.proc_start)],
                                  timeout=executor.settings.chip_release_s)


def _attempt_of(p: holders.ProcInfo) -> tuple[int, int] | None:
    from tpuq import jobenv

    try:
        return int(p.environ_marker[jobenv.JOB_ID]), int(p.environ_marker[jobenv.ATTEMPT])
    except (KeyError, ValueError):
        return None
