"""A hand-over (SIGUSR2, an upgrade): the agent leaves its running jobs with their keepers
for the next agent, and they wait for one a stated time (TPUQ_HANDOVER_S).

Order matters. The supervisors let go first, so none of them renews a lease again (a
renewal after the extension would shorten the database's lease under the keeper's
longer one, and the job could run twice). The host is marked handed over, so it gets no
new work until an agent registers there again. Then each job's lease is extended in the
database and, from a time taken before that write, in its keeper: the keeper's lease
always ends first. If no agent comes, each keeper stops its job before the lease ends,
records the end itself, and the job is requeued elsewhere.
"""

from __future__ import annotations

import logging

from tpuq.agent.attempts.executor import Executor
from tpuq.agent.attempts.spec import AttemptSpec
from tpuq.agent.keeper.link import adopt, clock
from tpuq.agent.keeper.messages import Lease
from tpuq.state import attempts, hosts

log = logging.getLogger("tpuq.agent")


def hand_over(executor: Executor, held: hosts.Held, handover_s: float) -> None:
    """Detach every supervisor, mark the host, extend each handed-over job's lease."""
    sups = executor.supervisors()
    log.info("handing over: %d job(s) stay with their keepers for the next agent, "
             "for up to %gs", len(sups), handover_s)
    executor.accepting = False
    for sup in sups:
        sup.detach()
    executor.wait_idle(timeout=10.0)
    # a slice job's task is not adopted by a new agent (recovery.py ends it): its
    # ordinary lease stands
    handed = [sup.spec for sup in sups if sup.handed_over and sup.spec.gang is None]
    try:
        with executor.db.write() as s:
            held.stopped(s, handover_s)
    except Exception as e:  # noqa: BLE001 - the jobs keep their ordinary leases
        log.warning("could not mark the host handed over: %s", str(e).splitlines()[0])
    for spec in handed:
        _extend(executor, spec, handover_s)


def _extend(executor: Executor, spec: AttemptSpec, handover_s: float) -> None:
    """One job's lease, `handover_s` from now: the database's, then its keeper's."""
    asked = clock()
    try:
        with executor.db.write() as s:
            lease = attempts.renew(s, spec.job_id, spec.attempt, executor.name, handover_s)
    except Exception as e:  # noqa: BLE001 - its keeper keeps the ordinary lease
        log.warning("job %s: lease not extended for the hand-over: %s", spec.job_id,
                    str(e).splitlines()[0])
        return
    found = adopt(executor.keepers.run_dir, spec.job_id, spec.attempt) \
        if lease.held else None
    if found is not None:
        link, _ = found
        link.send(Lease(until=asked + handover_s))
        link.close()
