"""Arrays end to end: one submission, one task per index with its own job, checkpoint
directory and TPUQ_ARRAY_INDEX; a throttle that is never exceeded; an args file; one
row in status; cancel as a whole."""

from __future__ import annotations

import json

from tests.harness import FakeHost, fixture_cmd


def overlap(records: list[str]) -> int:
    """The most tasks that ran at once, from the tasks' own start and end records."""
    events = []
    for line in records:
        parts = line.split()
        events.append((float(parts[-1]), 1 if parts[0] == "start" else -1))
    most = now = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        now += step
        most = max(most, now)
    return most


def test_an_array_runs_each_index_once_never_above_its_throttle(stack, tmp_path):
    host = FakeHost(tmp_path / "host", chips=8)
    stack.start_agent(host)
    out = tmp_path / "records"
    r = stack.tpuq("submit", "--chips", "1", "--array", "0-11%3",
                   *fixture_cmd("array_task.py", out, "-", 0.3))
    first = int(r.stdout.split()[2].rstrip(":"))
    assert r.stdout.startswith(f"submitted array {first}: 12 tasks")
    tasks = list(range(first, first + 12))
    stack.wait_all(tasks, "succeeded", timeout=120)
    records = out.read_text().splitlines()
    starts = [line.split() for line in records if line.startswith("start")]
    assert sorted(int(s[1]) for s in starts) == list(range(12)), "each index once"
    assert len({s[2] for s in starts}) == 12 and len({s[3] for s in starts}) == 12, \
        "each task is a job of its own, with its own checkpoint directory"
    assert overlap(records) <= 3, "the throttle was exceeded"
    assert overlap(records) >= 2, "8 free chips: the throttle, not the host, limited it"


def test_args_file_status_row_and_cancel_as_a_whole(stack, host, tmp_path):
    stack.start_agent(host)
    sweep = tmp_path / "sweep.txt"
    sweep.write_text("# learning rates\n--lr 0.1\n\n--lr 0.01 --name 'b c'\n--lr 0.001\n")
    gate, out = tmp_path / "gate", tmp_path / "records"
    r = stack.tpuq("submit", "--json", "--hold", "--chips", "1", "--args-file", str(sweep),
                   *fixture_cmd("array_task.py", out, gate, 0))
    tasks = json.loads(r.stdout)["tasks"]
    assert len(tasks) == 3
    rows = stack.tpuq("status", COLUMNS="200").stdout
    assert f"{tasks[0]}_[0-2]" in rows and "array_task.py" in rows, rows
    assert str(tasks[1]) not in rows.split(), "waiting tasks are one row"
    expanded = stack.tpuq("status", "--expand", COLUMNS="200").stdout
    assert "array_task.py[2]" in expanded
    stack.tpuq("release", "--array", str(tasks[0]))
    stack.wait_log(tasks[1], "args --lr 0.01 --name b c")
    stack.tpuq("cancel", "--array", str(tasks[0]))
    stack.wait_all(tasks, "cancelled", timeout=60)
    r = stack.tpuq("cancel", "--array", str(tasks[0]), check=False)
    assert r.returncode == 3 and "no open task in array" in r.stderr
