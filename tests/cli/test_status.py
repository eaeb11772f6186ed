"""`tpuq status` at a glance: NAME is the script's, rows fit the width and never wrap,
columns are picked with -o, filters are validated, a job's text is never markup."""

from __future__ import annotations

import json

import pytest

from tests.harness import fixture_cmd
from tpuq.jobjson import epoch


def lines(stack, *args: str, width: int) -> list[str]:  # type: ignore[no-untyped-def]
    out = stack.tpuq("status", *args, COLUMNS=str(width)).stdout
    return out.splitlines()


def test_status_names_jobs_fits_the_width_and_explains_waits(stack, host, tmp_path):
    stack.start_agent(host)
    gate = tmp_path / "gate"
    script = tmp_path / "long_training_run.py"
    script.write_text("import sys, os\nwhile not os.path.exists(sys.argv[1]): pass\n")
    running = stack.submit(str(script), str(gate))
    stack.wait_process(running)
    held = stack.submit("--hold", "--name", "[bold]sweep-" + "x" * 90, "--", "/bin/true")
    stack.wait_state(held, "held")
    for width in (80, 120, 200):
        rows = lines(stack, width=width)
        assert all(len(r) <= width for r in rows), (width, rows)
        header = next(r for r in rows if r.lstrip().startswith("ID"))
        assert header.split()[:4] == ["ID", "NAME", "USER", "STATE"]
        mine = next(r for r in rows if r.split()[:1] == [str(running)])
        assert "long_training_run.py" in mine and "running" in mine
        assert any(r.split()[:1] == [str(held)] and "[bold]sweep-" in r for r in rows), \
            "a name is shown as written, never as markup"
    wide = "\n".join(lines(stack, width=200))
    assert f"held: `tpuq release {held}` lets it run" in wide
    picked = lines(stack, "-o", "id,state", width=80)
    assert picked[0].split() == ["ID", "STATE"]
    assert [r.split() for r in picked[1:3]] == [[str(running), "running"], [str(held), "held"]]
    only = lines(stack, "--name", "long_*", width=200)
    assert [r.split()[0] for r in only[1:] if r.split() and r.split()[0].isdigit()] == \
        [str(running)]
    assert json.loads(stack.tpuq("status", "--json").stdout)[0]["started_at"] is not None
    gate.touch()
    stack.wait_state(running, "succeeded")


def test_status_refuses_unknown_states_and_columns(stack):
    r = stack.tpuq("status", "--state", "bogus", check=False)
    assert r.returncode == 2 and "'bogus' is not one of" in r.stderr
    r = stack.tpuq("status", "-o", "id,colour", check=False)
    assert r.returncode == 2 and "unknown column colour" in r.stderr


def test_a_draining_host_is_the_reason_a_job_waits(stack, host, tmp_path):
    stack.start_agent(host)
    stack.tpuq("drain", host.name)
    job = stack.submit("--chips", "1", *fixture_cmd("wait_file.py", tmp_path / "g"))
    rows = "\n".join(lines(stack, width=200))
    assert f"no host in service: {host.name} draining" in rows
    shown = json.loads(stack.tpuq("show", str(job), "--json").stdout)
    assert shown["waiting_for"] == f"no host in service: {host.name} draining"


def test_status_start_says_when_each_waiting_job_starts_or_why_not(stack, host, tmp_path):
    """As squeue --start: the running job's time limit is when the host frees; the job
    behind the one without a limit gets no time, and the reason says why."""
    stack.start_agent(host)
    gate = tmp_path / "gate"
    running = stack.submit("--time", "2h", *fixture_cmd("wait_file.py", gate))
    stack.wait_process(running)
    after = stack.submit("--time", "1h", "--", "/bin/true")
    shown = {j["id"]: j for j in json.loads(stack.tpuq("status", "--start", "--json").stdout)}
    assert set(shown) == {after}  # waiting jobs only
    started_at = stack.attempts(running)[-1].started_at
    assert epoch(shown[after]["expected_start"]) == pytest.approx(started_at + 7200, abs=1)
    assert shown[after]["position"] == 1
    rows = lines(stack, "--start", width=200)
    assert rows[0].split()[:8] == ["ID", "NAME", "USER", "STATE", "CHIPS", "TIME", "START",
                                   "REASON"]
    assert any(r.split()[:1] == [str(after)] and " in 1h" in r for r in rows), rows
    stack.tpuq("cancel", str(running))
    stack.wait_state(running, "cancelled")
    stack.wait_state(after, "succeeded")
    forever = stack.submit(*fixture_cmd("wait_file.py", gate))
    stack.wait_process(forever)
    behind = stack.submit("--", "/bin/true")
    (j,) = json.loads(stack.tpuq("status", "--start", "--json").stdout)
    assert j["id"] == behind and j["expected_start"] is None
    assert "no time limit" in j["waiting_for"]
    gate.touch()
    stack.wait_state(forever, "succeeded")
