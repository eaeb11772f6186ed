"""A function job's files on its host: its pickled call in before the attempt starts,
its pickled outcome out after it ended (tpuq/runfn.py is what runs between).

Both sit beside the attempt's log (`<log>.fn`, `<log>.result`), the job's only (0600,
given to its owner in owner mode). The outcome is stored in the database, so `result()`
works from any machine of the deployment.
"""

from __future__ import annotations

import logging
import os

from tpuq import runfn
from tpuq.state import functions
from tpuq.state.db import Database

log = logging.getLogger("tpuq.agent")
MAX_RESULT = 16 * 1024 * 1024  # bytes of a pickled outcome kept in the database


def paths(log_path: str) -> tuple[str, str]:
    return f"{log_path}.fn", f"{log_path}.result"


def stage_in(db: Database, job_id: int, log_path: str) -> dict[str, str]:
    """Write the call for the attempt; the variables that tell tpuq.runfn where things are.
    ValueError when the database has no call for this job (it cannot start)."""
    with db.read() as s:
        payload = functions.payload_of(s, job_id)
    if payload is None:
        raise ValueError(f"job {job_id} runs tpuq.runfn but has no function stored")
    call, result = paths(log_path)
    for path, data in ((call, payload), (result, b"")):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    return {runfn.FUNCTION: call, runfn.RESULT: result}


def stage_out(db: Database, job_id: int, attempt: int, log_path: str) -> None:
    """Store what the attempt wrote, if anything (a process killed before its end wrote
    nothing: the result of an earlier attempt, if any, stays)."""
    import cloudpickle

    _, path = paths(log_path)
    try:
        size = os.path.getsize(path)
        if size == 0:
            return
        if size > MAX_RESULT:
            data = bytes(cloudpickle.dumps((
                "error", None, f"the function's result pickles to {size} bytes; at most "
                f"{MAX_RESULT} are kept: write large results to a file and return its path")))
        else:
            with open(path, "rb", opener=lambda p, fl: os.open(p, fl | os.O_NOFOLLOW)) as f:
                data = f.read(MAX_RESULT + 1)
    except OSError as e:
        log.warning("job %s attempt %s: its function's result is unreadable: %s", job_id,
                    attempt, e)
        return
    with db.write() as s:
        functions.store_result(s, job_id, attempt, data)
