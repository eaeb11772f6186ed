"""Preemption and recovery, embedded deployment, with a fake GCE metadata server.

One round (a fresh agent and database, TPUQ_METADATA_URL pointing at
tests.fakes.metadata_server.FakeMetadata on loopback):

1. bench/coop_job.py runs (a cooperative job: tpuq.job handler, checkpoints a step
   counter, exits 75 on the signal) and has done a few steps;
2. notice: `instance/maintenance-event` flips to TERMINATE_ON_HOST_MAINTENANCE (the
   agent's hanging GET is in flight); t0 = just before the flip;
   - notice -> signalled: the job's own SIGTERM handler time - t0;
   - notice -> requeued: the job's `queued` event time in the database - t0;
3. the event goes back to NONE; the host takes work again and attempt 2 resumes;
   lost steps = steps the job had done when signalled - the step attempt 2 resumed from;
4. agent restart: the agent, the attempt's keeper and the job's process group are
   SIGKILLed (a job killed under a live keeper is the job's own failure), nothing else
   changes, the agent is started again; agent restart -> running again = attempt 3's
   `started_at` - the moment the new agent process was launched (beside it: launch ->
   the new agent answers on its socket, the floor of that figure).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.embedded import BenchError, EmbeddedStack, wait_for

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "bench" / "coop_job.py"
EVENT = "instance/maintenance-event"
GRACE_S = 10.0
STEP_DELAY_S = 0.05
CHECKPOINT_EVERY = 20
TOTAL_STEPS = 100_000  # never reached: the bench stops the job


def _fake_metadata() -> Any:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.fakes.metadata_server import FakeMetadata

    md = FakeMetadata()
    # a killed agent's hanging GET ends in a broken pipe: expected here, not worth a traceback
    md._server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
    return md


def _records(path: str) -> list[dict[str, Any]]:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]
    except FileNotFoundError:
        return []


def _find(path: str, event: str, attempt: int) -> dict[str, Any] | None:
    return next((r for r in _records(path)
                 if r["event"] == event and r["attempt"] == attempt), None)


def _wait_record(stack: EmbeddedStack, path: str, event: str, attempt: int,
                 timeout: float = 30.0) -> dict[str, Any]:
    try:
        return wait_for(lambda: _find(path, event, attempt), timeout, 0.005,
                        f"the job's {event!r} record of attempt {attempt}")
    except BenchError as e:
        raise BenchError(f"{e}\nagent log:\n{stack.log_tail()}") from None


def _event_at(stack: EmbeddedStack, job_id: int, to_state: str, attempt: int) -> float | None:
    from tpuq.state.models import JobEvent

    with stack.db.read() as s:
        return s.query(JobEvent.at).filter(
            JobEvent.job_id == job_id, JobEvent.to_state == to_state,
            JobEvent.attempt == attempt).order_by(JobEvent.at).limit(1).scalar()


def _attempt(stack: EmbeddedStack, job_id: int, number: int) -> Any:
    from tpuq.state.models import Attempt

    with stack.db.read() as s:
        return s.query(Attempt).filter_by(job_id=job_id, number=number).one_or_none()


def _submit(stack: EmbeddedStack, records: str) -> int:
    import getpass

    from tpuq.spec import JobSpec

    return stack.submit_spec(JobSpec(
        command=[sys.executable, str(JOB), records, str(STEP_DELAY_S), str(CHECKPOINT_EVERY),
                 str(TOTAL_STEPS)],
        cwd=stack.home, owner=getpass.getuser(), team="default",
        env={"PATH": stack.env.get("PATH", "")}, grace_s=GRACE_S))


def one_round(keep: bool) -> dict[str, float]:
    md = _fake_metadata().start()
    try:
        with EmbeddedStack(keep=keep, extra_env={"TPUQ_METADATA_URL": md.url}) as stack:
            return _measure(stack, md)
    finally:
        md.close()


def _measure(stack: EmbeddedStack, md: Any) -> dict[str, float]:
    records = os.path.join(stack.home, "coop-records.jsonl")
    job_id = _submit(stack, records)
    _wait_record(stack, records, "start", 1)
    if not md.wait_for_request("wait_for_change=true", 30.0):
        raise BenchError("the agent never watched instance/maintenance-event")
    time.sleep(0.3)  # a few steps in, past a checkpoint or not: lost steps must be 0 anyway

    # -- 2. the notice
    t0 = time.time()
    md.set(EVENT, "TERMINATE_ON_HOST_MAINTENANCE")
    sig = _wait_record(stack, records, "signal", 1, timeout=GRACE_S + 30)
    requeued_at = wait_for(lambda: _event_at(stack, job_id, "queued", 1), GRACE_S + 30, 0.01,
                           f"job {job_id} to be requeued")
    att1 = _attempt(stack, job_id, 1)

    # -- 3. the notice is over: attempt 2 resumes from the checkpoint
    md.set(EVENT, "NONE")
    start2 = _wait_record(stack, records, "start", 2, timeout=60)
    lost = max(0, int(sig["step_at_signal"]) - int(start2["resumed_from"]))

    # -- 4. agent (and job) SIGKILLed, then restarted with nothing else changed
    att2 = wait_for(lambda: (a := _attempt(stack, job_id, 2)) and a.pid and a, 30, 0.01,
                    f"attempt 2 of job {job_id} to record its pid")
    time.sleep(0.3)
    stack.kill_agent()
    stack.kill_keepers()  # a crash of the host's tpuq side: agent, keeper and job
    from tpuq.agent.tpu.holders import is_same_process

    if att2.proc_start and is_same_process(att2.pid, att2.proc_start):
        os.killpg(att2.pid, signal.SIGKILL)  # the job tpuq started for this bench
    stack.restart_agent()
    t_restart = stack.agent_started_at
    agent_ready_ms = (time.time() - t_restart) * 1000.0
    att3 = wait_for(lambda: (a := _attempt(stack, job_id, 3)) and a.started_at and a, 30,
                    0.005, f"attempt 3 of job {job_id} to start after the restart")
    _wait_record(stack, records, "start", 3)

    return {
        "preempt_notice_to_signal_ms": (float(sig["at"]) - t0) * 1000.0,
        "preempt_notice_to_requeued_ms": (float(requeued_at) - t0) * 1000.0,
        "preempt_lost_steps": float(lost),
        "preempt_checkpoint_step_recorded": float(att1.checkpoint_step
                                                  if att1 and att1.checkpoint_step is not None
                                                  else -1),
        "preempt_restart_to_running_ms": (float(att3.started_at) - t_restart) * 1000.0,
        "preempt_agent_start_ms": agent_ready_ms,
        "preempt_grace_ms": GRACE_S * 1000.0,
    }


def median_of(rounds: list[dict[str, float]]) -> dict[str, float]:
    out = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    out["preempt_lost_steps_max"] = max(r["preempt_lost_steps"] for r in rounds)
    out["preempt_rounds"] = float(len(rounds))
    return out
