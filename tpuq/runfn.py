"""What a function job's process runs: `python -m tpuq.runfn`.

The agent writes the job's pickled call to $TPUQ_FUNCTION before the attempt starts
and reads $TPUQ_RESULT after it ended, so the job needs no database credentials and
the process is a fresh interpreter exec'd by its keeper like every job (never a fork:
JAX breaks under fork). The outcome is cloudpickled as

    ("ok", value)                          exit 0
    ("error", exception|None, traceback)   exit 1 (a failure: retried as --max-retries says)

An exception that cannot be pickled is sent as None beside its traceback text.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

FUNCTION = "TPUQ_FUNCTION"
RESULT = "TPUQ_RESULT"
MODULE = "tpuq.runfn"
MAX_CALL = 512 * 1024  # bytes of a pickled call (fn, args, kwargs) a submit may carry


def is_function_command(command: Any) -> bool:
    """The command of a function job: [python, "-m", "tpuq.runfn"]."""
    return len(command) == 3 and tuple(command[1:]) == ("-m", MODULE)


def too_big(call: bytes) -> str | None:
    """Why a pickled call is refused (checked by the client before sending, and again
    by whoever answers the submit), or None."""
    if len(call) <= MAX_CALL:
        return None
    return (f"the function and its arguments pickle to {len(call)} bytes; at most "
            f"{MAX_CALL}: pass large data as a file path")


def outcome(call: bytes) -> tuple[Any, ...]:
    """Run the pickled (fn, args, kwargs): ("ok", value) or ("error", exc, traceback)."""
    import cloudpickle

    try:
        fn, args, kwargs = cloudpickle.loads(call)
        return ("ok", fn(*args, **kwargs))
    except BaseException as e:  # noqa: BLE001 - the caller gets whatever the function raised
        if isinstance(e, KeyboardInterrupt):
            raise
        return ("error", e, traceback.format_exc())


def dump(result: tuple[Any, ...]) -> bytes:
    """The outcome pickled; a value or exception that does not pickle becomes an error
    that says so (the traceback text always does)."""
    import cloudpickle

    try:
        return bytes(cloudpickle.dumps(result))
    except Exception as e:  # noqa: BLE001 - any pickling failure
        if result[0] == "ok":
            why = f"the function returned a value that cannot be pickled: {e!r}"
            return bytes(cloudpickle.dumps(("error", None, why)))
        return bytes(cloudpickle.dumps(("error", None, result[2])))


def main() -> int:
    path, out = os.environ.get(FUNCTION), os.environ.get(RESULT)
    if not path or not out:
        print(f"tpuq.runfn: ${FUNCTION} and ${RESULT} are set by tpuq's agent for a job "
              "submitted with tpuq.client.submit(fn); run from anywhere else it does nothing",
              file=sys.stderr)
        return 2
    with open(path, "rb") as f:
        result = outcome(f.read())
    with open(out, "wb") as f:
        f.write(dump(result))
    if result[0] == "error":
        sys.stderr.write(result[2])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
