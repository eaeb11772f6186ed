"""Job arrays: the `--array` syntax (SLURM's) and the task variables.

`0-99` (both ends included), `1,3,5-7`, `0-99:2` (a step), and `%8` at the end: at
most 8 tasks run at once. Stdlib only: the CLI parses here, the agent names the
variables from here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from tpuq.jobenv import ARRAY_INDEX
from tpuq.protocol import MAX_TASKS
from tpuq.spec import JobSpec, SpecError

INDEX = ARRAY_INDEX
_PART = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?\Z")


def parse(text: str) -> tuple[list[int], int | None]:
    """(indices in order, throttle or None); SpecError for anything else."""
    body, _, throttle = text.strip().partition("%")
    limit = None
    if throttle:
        if not throttle.isdigit() or int(throttle) < 1:
            raise SpecError(f"--array {text!r}: the %N throttle must be a whole number >= 1")
        limit = int(throttle)
    indices: list[int] = []
    for part in body.split(","):
        m = _PART.match(part.strip())
        if not m:
            raise SpecError(f"--array {text!r}: expected e.g. 0-99, 1,3,5-7, 0-99:2, 0-99%8")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) else 1
        if hi < lo or step < 1:
            raise SpecError(f"--array {text!r}: {part} is an empty range")
        if len(indices) + (hi - lo) // step + 1 > MAX_TASKS:
            raise SpecError(f"--array {text!r}: more than {MAX_TASKS} tasks")
        indices.extend(range(lo, hi + 1, step))
    if len(set(indices)) != len(indices):
        raise SpecError(f"--array {text!r}: an index appears twice")
    return indices, limit


_REF = re.compile(r"#?(\d{1,19})(?:_(\d{1,19}))?\Z")


def parse_ref(text: str) -> tuple[int, int | None]:
    """A job as SLURM names it: `12` (a job, or every task of array 12) -> (12, None);
    `54_2` (task 2 of array 54) -> (54, 2). SpecError for anything else."""
    from tpuq.spec import MAX_ID

    m = _REF.match(text.strip())
    if not m or not 1 <= int(m.group(1)) <= MAX_ID or \
            (m.group(2) is not None and int(m.group(2)) > MAX_ID):
        raise SpecError(f"{text!r} is not a job id (12), an array's (54) or an array "
                        "task's (54_2)")
    return int(m.group(1)), None if m.group(2) is None else int(m.group(2))


def compress(indices: list[int]) -> str:
    """[3, 4, 5, 9] -> "3-5,9" (how status shows the tasks of an array that wait)."""
    out: list[str] = []
    for i in sorted(indices):
        if out and "-" not in out[-1].split(",")[-1] and int(out[-1]) == i - 1:
            out[-1] = f"{out[-1]}-{i}"
        elif out and "-" in out[-1] and int(out[-1].rsplit("-", 1)[1]) == i - 1:
            out[-1] = f"{out[-1].rsplit('-', 1)[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def task_specs(spec: JobSpec, indices: Sequence[int], args: Sequence[Sequence[str]]
               ) -> list[JobSpec]:
    """One spec per task: TPUQ_ARRAY_INDEX in its environment and, from an args file,
    its own arguments after the command."""
    if not indices or len(indices) > MAX_TASKS:
        raise SpecError(f"an array has 1 to {MAX_TASKS} tasks, not {len(indices)}")
    if args and len(args) != len(indices):
        raise SpecError(f"{len(args)} argument lines for {len(indices)} tasks")
    return [dataclasses.replace(spec, env={**spec.env, INDEX: str(i)},
                                command=[*spec.command, *(args[n] if args else ())])
            for n, i in enumerate(indices)]
