"""Queuing from Python without shelling out: a script or a command with the submit
command's options (`tpuq.client.submit_command`), a whole sweep of functions and
commands in one request (`submit_many`), and resubmitting a function job, which runs its
stored call again (or is refused at once, never queued to fail). Both deployments, real
agents."""

from __future__ import annotations

import os

import pytest

from tpuq.client import ClientError, Job, call, command, submit, submit_command, submit_many
from tpuq.protocol import Failure
from tpuq.settings import load


def settings(stack, **env: str):  # type: ignore[no-untyped-def]
    """The test's own account (only a function job's owner loads its result)."""
    return load(stack.env(TPUQ_USER="", **env))


def test_a_script_and_a_command_are_queued_with_the_submit_options(stack, host, tmp_path,
                                                                   monkeypatch):
    stack.start_agent(host)
    cfg = settings(stack)
    script = tmp_path / "show.py"
    script.write_text("import sys\nprint('args', sys.argv[1:])\n")
    monkeypatch.chdir(tmp_path)
    job = submit_command(["show.py", "--lr", "3e-4"], chips=2, name="lr-sweep",
                         time_limit="1h", priority=3, settings=cfg)
    assert isinstance(job, Job) and job.wait(timeout=60) == "succeeded"
    row = stack.job(job.id)
    assert row.command[1:] == [str(script), "--lr", "3e-4"]
    assert (row.chips, row.name, row.time_limit_s, row.priority) == (2, "lr-sweep", 3600.0, 3)
    assert "args ['--lr', '3e-4']" in job.logs()

    shell = submit_command("bash -c 'echo from $0'", env=["STEP=7"], hold=True, settings=cfg)
    assert shell.state() == "held" and stack.job(shell.id).command[0].endswith("/bash")
    with pytest.raises(ClientError, match="command not found: no-such-tool") as bad:
        submit_command(["no-such-tool"], settings=cfg)
    assert bad.value.kind is Failure.REFUSED
    with pytest.raises(ClientError, match="--chips must be at least 1"):
        submit_command(["true"], chips=0, settings=cfg)


def test_a_sweep_of_functions_and_commands_is_one_request(stack, host, tmp_path, monkeypatch):
    stack.start_agent(host)
    cfg = settings(stack)
    monkeypatch.chdir(tmp_path)

    def square(x: int) -> int:
        return x * x

    jobs = submit_many([*(call(square, i) for i in range(5)),
                        command(["true"], name="plain", priority=2)],
                       chips=1, settings=cfg)
    assert [j.id for j in jobs] == list(range(jobs[0].id, jobs[0].id + 6))
    assert [j.result(timeout=120) for j in jobs[:5]] == [0, 1, 4, 9, 16]
    assert jobs[5].wait(timeout=60) == "succeeded"
    rows = [stack.job(j.id) for j in jobs]
    assert {r.chips for r in rows} == {1}
    assert rows[5].name == "plain" and rows[5].priority == 2 and rows[0].priority == 0
    assert rows[0].name.endswith("square")

    # one refusal refuses the whole request: nothing is queued
    before = stack.job_count()
    with pytest.raises(ClientError, match="--priority"):
        submit_many([command(["true"]), command(["true"], priority=10**9)], settings=cfg)
    with pytest.raises(ClientError, match="after: no job"):
        submit_many([command(["true"]), command(["true"], after=[10**9])], settings=cfg)
    assert stack.job_count() == before


def test_a_batch_bigger_than_one_message_goes_in_several(stack, tmp_path, monkeypatch):
    """No agent: the client writes the database itself, one transaction per message."""
    cfg = settings(stack)
    monkeypatch.chdir(tmp_path)
    blob = "x" * 200_000  # each call carries 200 kB: 12 of them need 3 messages
    jobs = submit_many([call(len, blob + str(i)) for i in range(12)], hold=True, settings=cfg)
    assert len({j.id for j in jobs}) == 12 and all(j.state() == "held" for j in jobs)


def test_a_function_job_resubmits_with_its_stored_call(stack, host, tmp_path):
    stack.start_agent(host)
    cfg = settings(stack)
    flag = tmp_path / "fixed"

    def flaky() -> str:
        if not os.path.exists(str(flag)):
            raise RuntimeError("not yet")
        return "ok now"

    job = submit(flaky, settings=cfg)
    with pytest.raises(RuntimeError, match="not yet"):
        job.result(timeout=60)
    flag.write_text("")
    out = stack.tpuq("resubmit", "--failed", "--json", TPUQ_USER="").stdout
    (new,) = __import__("json").loads(out)
    assert new["ok"] and new["id"] != job.id
    assert Job(new["id"], cfg).result(timeout=60) == "ok now"


def test_someone_elses_function_job_is_refused_at_once(stack, host):
    """Its pickled call would run its owner's code as the resubmitter."""
    stack.start_agent(host)
    job = submit(abs, -3, hold=True, settings=settings(stack))
    r = stack.tpuq("resubmit", str(job.id), check=False, TPUQ_USER="someone-else")
    assert r.returncode != 0 and len(r.stderr.splitlines()) == 1
    assert "function job" in r.stderr and "only" in r.stderr
    assert stack.job_count() == 1


def test_a_function_job_whose_call_is_gone_is_refused(stack, host):
    stack.start_agent(host)
    job = submit(abs, -3, hold=True, settings=settings(stack))
    from sqlalchemy import delete

    from tpuq.state.models import JobFunction

    with stack.db.write() as s:
        s.execute(delete(JobFunction).where(JobFunction.job_id == job.id))
    r = stack.tpuq("resubmit", str(job.id), check=False, TPUQ_USER="")
    assert r.returncode != 0 and "stored call is gone" in r.stderr
    assert stack.job_count() == 1
