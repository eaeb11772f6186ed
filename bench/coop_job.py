"""A cooperative training job in miniature, for the preemption benchmark (no JAX).

    python bench/coop_job.py RECORDS STEP_DELAY_S CHECKPOINT_EVERY TOTAL_STEPS

It behaves like examples/train.py as far as tpuq can tell, in a fraction of its start-up
time: a step counter advances every STEP_DELAY_S; every CHECKPOINT_EVERY steps it is
saved to $TPUQ_CHECKPOINT_DIR/step (write + rename) and reported with
`tpuq.job.checkpointed(step)`; an attempt resumes from the saved step. On the
preemption signal (tpuq.job's handler, chained to one that notes the time and the step
reached) it finishes the step in flight, checkpoints, and exits 75 (`job.requeue`).

RECORDS gets one JSON line per event (O_APPEND, one write each):
  {"event": "start", "attempt": N, "resumed_from": STEP, "at": T}
  {"event": "signal", "attempt": N, "at": T_HANDLER, "step_at_signal": S, "checkpoint": C}
  {"event": "done", "attempt": N, "step": S, "at": T}
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

from tpuq import job

records, delay, every, total = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
step = 0
signalled: dict[str, float] = {}


def record(**fields: Any) -> None:
    fd = os.open(records, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps({**fields, "attempt": job.attempt()}) + "\n").encode())
    finally:
        os.close(fd)


def on_signal(signum: int, frame: object) -> None:
    # runs after tpuq.job's handler (which chains to this one): note when and where
    signalled.setdefault("at", time.time())
    signalled.setdefault("step", step)


def save(at_step: int) -> None:
    path = job.checkpoint_dir() / "step"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(at_step))
    os.replace(tmp, path)
    job.checkpointed(at_step)


signal.signal(signal.SIGTERM, on_signal)
job.install()
saved = job.checkpoint_dir() / "step"
step = int(saved.read_text()) if saved.exists() else 0
record(event="start", resumed_from=step, at=time.time())
while step < total:
    time.sleep(delay)  # one training step
    step += 1
    if job.preemption_requested():
        save(step)
        record(event="signal", at=signalled.get("at", time.time()),
               step_at_signal=int(signalled.get("step", step)), checkpoint=step)
        job.requeue("preempted")
    if step % every == 0:
        save(step)
record(event="done", step=step, at=time.time())
