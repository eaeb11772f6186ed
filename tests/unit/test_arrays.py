"""The --array syntax (SLURM's) and the throttle in the policy."""

from __future__ import annotations

import pytest

from tpuq import arrays
from tpuq.scheduler.policy import plan
from tpuq.scheduler.views import HostView, JobView
from tpuq.spec import SpecError

NOW = 1_750_000_000.0


@pytest.mark.parametrize("text, indices, throttle", [
    ("0-3", [0, 1, 2, 3], None),
    ("1,3,5-7", [1, 3, 5, 6, 7], None),
    ("0-9:3%2", [0, 3, 6, 9], 2),
    ("7", [7], None),
])
def test_array_syntax(text: str, indices: list[int], throttle: int | None) -> None:
    assert arrays.parse(text) == (indices, throttle)


@pytest.mark.parametrize("text", ["", "3-1", "a-b", "0-9%0", "1,1", "0-200000", "0-9:0"])
def test_array_mistakes(text: str) -> None:
    with pytest.raises(SpecError, match="--array"):
        arrays.parse(text)


def test_compress_for_status() -> None:
    assert arrays.compress([5, 3, 4, 9, 11, 10]) == "3-5,9-11"
    assert arrays.compress([2]) == "2"


def test_the_throttle_caps_running_tasks_across_passes() -> None:
    hosts = [HostView(f"h{i}", "v4-8", (0, 1, 2, 3), frozenset(range(4))) for i in range(3)]
    tasks = [JobView(id=10 + i, team="a", user="u", priority=0, submitted_at=NOW, chips=1,
                     array_id=10, array_throttle=3) for i in range(8)]
    other = JobView(id=99, team="a", user="u", priority=0, submitted_at=NOW + 1, chips=1)
    p = plan([*tasks, other], hosts, {}, NOW)
    assert sorted(a.job_id for a in p.assignments) == [10, 11, 12, 99]
    assert p.waiting[13] == "array 10 at its limit of 3 running"
    p = plan(tasks[3:], hosts, {}, NOW, array_running={10: 2})
    assert [a.job_id for a in p.assignments] == [13], "two run already: one more may"
