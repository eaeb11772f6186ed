"""`tpuq history`: ended jobs with runtime and chip-hours, charged and not (a preempted
attempt is free), as a table, JSON and CSV."""

from __future__ import annotations

import csv
import io
import json

from tpuq.spec import parse_duration


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
    assert rows[ok]["chip_hours"] >= 2 * 0.5 / 3600 and parse_duration(rows[ok]["runtime"]) >= 0.5
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


def test_usage_totals_per_user_and_team(stack, host):
    stack.start_agent(host)
    jobs = [stack.submit("--chips", "1", "--", "sleep", "0.2") for _ in range(2)]
    stack.wait_all(jobs, "succeeded")
    by_user = json.loads(stack.tpuq("usage", "--json").stdout)
    assert [(u["user"], u["jobs"]) for u in by_user] == [("tester", 2)]
    assert by_user[0]["chip_hours"] >= 2 * 0.2 / 3600
    by_team = json.loads(stack.tpuq("usage", "--by", "team", "--json").stdout)
    assert [(t["team"], t["jobs"]) for t in by_team] == [("default", 2)]
    assert "tester" in stack.tpuq("usage").stdout
