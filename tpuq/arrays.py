"""Job arrays: the `--array` syntax (SLURM's) and the task variables.

`0-99` (both ends included), `1,3,5-7`, `0-99:2` (a step), and `%8` at the end: at
most 8 tasks run at once. Stdlib only: the CLI parses here, the agent names the
variables from here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from tpuq.jobenv import ARRAY_INDEX
from tpuq.protocol import MAX_TASKS
from tpuq.spec import JobSpec, SpecError

MAX_INDEX = 10**9
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


class Tasks(NamedTuple):
    """An array's tasks, checked: the spec they share and what each adds to it."""

    spec: JobSpec  # validated; every task runs it with its own index (and words)
    indices: Sequence[int]
    args: Sequence[Sequence[str]]  # per task, the words appended to the command, or ()

    def command(self, n: int) -> list[str]:
        return [*self.spec.command, *self.args[n]] if self.args else self.spec.command

    def spec_of(self, n: int) -> JobSpec:
        """Task n as a spec of its own: TPUQ_ARRAY_INDEX in its environment."""
        return self.spec.replace(env={**self.spec.env, INDEX: str(self.indices[n])},
                                 command=self.command(n))


def checked_tasks(spec: JobSpec, indices: Sequence[int], args: Sequence[Sequence[str]]
                  ) -> Tasks:
    """The tasks of an array, each as valid as `JobSpec.validate` would find it.

    A task differs from `spec` only by TPUQ_ARRAY_INDEX in its environment and its
    words from an args file, so the spec is checked once, the task whose index is the
    longest (the largest environment) in full, and each task's command: not 10,000
    copies of the same environment."""
    if not indices or len(indices) > MAX_TASKS:
        raise SpecError(f"an array has 1 to {MAX_TASKS} tasks, not {len(indices)}")
    if args and len(args) != len(indices):
        raise SpecError(f"{len(args)} argument lines for {len(indices)} tasks")
    if not all(type(i) is int and 0 <= i <= MAX_INDEX for i in indices):
        raise SpecError(f"array indices are whole numbers from 0 to {MAX_INDEX}")
    if len(set(indices)) != len(indices):
        raise SpecError("an array index appears twice")
    tasks = Tasks(spec.validate(), list(indices), [list(a) for a in args])
    widest = max(range(len(indices)), key=lambda n: len(str(indices[n])))
    tasks.spec_of(widest).validate()
    if args:
        for n in range(len(indices)):
            JobSpec.check_command(tasks.command(n))
    return tasks
