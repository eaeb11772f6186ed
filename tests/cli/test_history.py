"""`tpuq history`: ended jobs with runtime and chip-hours, charged and not (a preempted
attempt is free), as a table, JSON and CSV."""

from __future__ import annotations

import csv
import io
import json


def test_history_counts_what_each_ended_job_cost(stack, host, tmp_path):
    stack.start_agent(host)
    ok = stack.submit("--chips", "2", "--", "sleep", "0.5")
    once = stack.submit("--chips", "1", "--", "sh", "-c",
                        '[ "$TPUQ_ATTEMPT" = 1 ] && { sleep 0.3; exit 75; }; exit 0')
    bad = stack.submit("--", "/bin/false")
    stack.wait_all([ok, once], "succeeded")
    stack.wait_state(bad, "failed")
    rows = {r["id"]: r for r in json.loads(stack.tpuq("history", "--json").stdout)}
    assert set(rows) == {ok, once, bad}
    assert rows[ok]["chip_hours"] >= 2 * 0.5 / 3600 and rows[ok]["runtime_s"] >= 0.5
    assert rows[once]["attempts"] == 2
    assert rows[once]["chip_hours_not_charged"] > 0, "a requeued attempt is not charged"
    assert rows[bad]["state"] == "failed"
    only = json.loads(stack.tpuq("history", "--json", "--state", "failed").stdout)
    assert [r["id"] for r in only] == [bad]
    table = stack.tpuq("history").stdout
    assert "CHIP-H" in table and "3 jobs" in table
    parsed = list(csv.DictReader(io.StringIO(stack.tpuq("history", "--csv").stdout)))
    assert [int(r["id"]) for r in parsed] == [r["id"] for r in rows.values()]
    assert json.loads(stack.tpuq("history", "--json", "--until", "2000-01-01").stdout) == []
    r = stack.tpuq("history", "--since", "yesterdayish", check=False)
    assert r.returncode == 2 and "a duration ago" in r.stderr
