"""SLURM habits: `--after` and `tpuq wait` of an array's id mean every task (ID_N one
task), `--begin` holds a job until its time (`tpuq update --begin` moves it, `now` lets
it start), `--output` writes a file of the owner's
(never through a planted link), `#TPUQ` lines in a script set options the command line
overrides, and `--notify start` tells of each start."""

from __future__ import annotations

import json
import os
import subprocess

from tests.e2e.test_dependencies import reason
from tests.fakes.receivers import webhook
from tests.harness import TPUQ, fixture_cmd, wait_for


def test_after_and_wait_of_an_array_mean_every_task_and_id_n_one(stack, host, tmp_path):
    stack.start_agent(host)
    gates = tmp_path / "gates"
    gates.mkdir()
    r = stack.tpuq("submit", "--json", "--chips", "1", "--array", "0-2",
                   *fixture_cmd("gate_per_index.py", gates))
    tasks = json.loads(r.stdout)["tasks"]
    array = tasks[0]
    whole = stack.submit("--chips", "1", "--after", str(array), "--", "/bin/true")
    one = stack.submit("--chips", "1", "--after", f"{array}_0", "--", "/bin/true")
    waiter = subprocess.Popen([*TPUQ, "wait", "--json", str(array)],
                              env=stack.env(), stdout=subprocess.PIPE, text=True)
    (gates / "0").touch()
    stack.wait_state(one, "succeeded")
    wait_for(lambda: reason(stack, whole) == f"waiting for array {array} (tasks 1-2)", 30,
             "the reason names the array and the tasks left")
    assert stack.job(whole).state == "queued", "task 0 (the array's id) alone is not enough"
    assert waiter.poll() is None, "`tpuq wait ARRAY` waits for every task"
    shown = stack.tpuq("show", str(whole)).stdout
    assert f"after     array {array} (all 3 tasks), 2 not yet (must have succeeded)" \
        in shown, shown
    assert f"after     task {array}_0 (job {array}), succeeded" in \
        stack.tpuq("show", str(one)).stdout
    assert f"`--after {array}` and `tpuq wait {array}` mean every task" in \
        stack.tpuq("show", str(array)).stdout
    r = stack.tpuq("wait", "--json", f"{array}_0")
    assert json.loads(r.stdout) == [{"id": array, "state": "succeeded"}]
    (gates / "1").touch()
    (gates / "2").touch()
    out, _ = waiter.communicate(timeout=60)
    assert waiter.returncode == 0
    assert [j["id"] for j in json.loads(out)] == tasks
    stack.wait_state(whole, "succeeded")
    last_end = max(stack.attempts(t)[-1].ended_at for t in tasks)
    assert stack.attempts(whole)[-1].started_at >= last_end
    r = stack.tpuq("submit", "--after", f"{array}_7", "--", "/bin/true", check=False)
    assert r.returncode == 2 and f"--after: no task {array}_7" in r.stderr, r.stderr
    r = stack.tpuq("wait", f"{array}_7", check=False)
    assert r.returncode == 2 and f"no task {array}_7" in r.stderr, r.stderr
    r = stack.tpuq("wait", "1_x", check=False)
    assert r.returncode == 2 and "is not a job id" in r.stderr


def test_begin_holds_a_job_until_its_time_with_the_reason(stack, host):
    stack.start_agent(host)
    later = stack.submit("--begin", "2099-01-01T00:00", "--", "/bin/true")
    soon = stack.submit("--begin", "now+5s", "--", "/bin/true")
    begin_at = stack.job(soon).begin_at
    assert begin_at is not None and begin_at > stack.job(soon).submitted_at
    wait_for(lambda: reason(stack, later) == "begins at 2099-01-01 00:00 (--begin)",
             30, "the reason says when")
    stack.wait_state(soon, "succeeded", timeout=30)
    assert stack.attempts(soon)[0].started_at >= begin_at, "not before its time"
    assert stack.job(later).state == "queued" and not stack.attempts(later)
    r = stack.tpuq("submit", "--begin", "25:00", "--", "/bin/true", check=False)
    assert (r.returncode, r.stderr) == (2, "tpuq: error: --begin '25:00': not a time of day\n")


def test_update_begin_moves_a_waiting_jobs_time_and_now_lets_it_start(stack, host, tmp_path):
    stack.start_agent(host)
    gate = tmp_path / "gate"
    running = stack.submit("--chips", "1", *fixture_cmd("wait_file.py", gate))
    stack.wait_process(running)
    job = stack.submit("--chips", "1", "--begin", "+1h", "--", "/bin/true")
    r = stack.tpuq("update", str(job), "--begin", "2099-01-01T00:00")
    assert r.stdout.startswith(f"job {job}: updated: begin 2099-"), r.stdout
    wait_for(lambda: reason(stack, job) == "begins at 2099-01-01 00:00 (--begin)",
             30, "the reason says when")
    (listed,) = [j for j in json.loads(stack.tpuq("status", "--json").stdout)
                 if j["id"] == job]
    assert listed["state"] == "queued"
    assert listed["begin_at"][:10] in ("2098-12-31", "2099-01-01")  # local midnight, in UTC
    assert stack.job(job).state == "queued" and not stack.attempts(job)
    stack.tpuq("update", str(job), "--begin", "now")
    stack.wait_state(job, "succeeded", timeout=30)
    for when in ("+1h", "now"):  # it started: refused in one line
        r = stack.tpuq("update", str(running), "--begin", when, check=False)
        assert r.returncode != 0 and r.stderr == \
            f"tpuq: error: job {running} is running: only a queued or held job changes\n"
    r = stack.tpuq("update", str(running), "--begin", "25:00", check=False)
    assert (r.returncode, r.stderr) == (2, "tpuq: error: --begin '25:00': not a time of day\n")
    assert stack.job(running).begin_at is None
    gate.touch()
    stack.wait_state(running, "succeeded")


def test_output_goes_to_a_file_of_the_owner_never_through_a_link(stack, host, tmp_path):
    stack.start_agent(host)
    logs = tmp_path / "logs"
    logs.mkdir()
    r = stack.tpuq("submit", "--json", "--array", "0-1", "--output", "logs/%A_%a-%j.out",
                   "--", "sh", "-c", "echo hello $TPUQ_ARRAY_INDEX", cwd=tmp_path)
    tasks = json.loads(r.stdout)["tasks"]
    stack.wait_all(tasks, "succeeded")
    for index, job in enumerate(tasks):
        path = logs / f"{tasks[0]}_{index}-{job}.out"
        assert path.read_text() == f"hello {index}\n"
        assert path.stat().st_uid == os.getuid()
    assert "hello 0" in stack.log_text(tasks[0]), "tpuq logs still has it"

    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (logs / "planted.out").symlink_to(victim)
    job = stack.submit("--output", str(logs / "planted.out"), "--", "echo", "secret")
    stack.wait_state(job, "succeeded")
    assert victim.read_text() == "keep me\n", "a planted link is never followed"
    assert "--output" in stack.log_text(job) and "symbolic link" in stack.log_text(job)
    r = stack.tpuq("submit", "--output", "/x/%q", "--", "/bin/true", check=False)
    assert r.returncode == 2 and "%q is not one of %j" in r.stderr


def test_directives_set_options_the_command_line_overrides(stack, host, tmp_path):
    stack.start_agent(host)
    script = tmp_path / "train.py"
    script.write_text("#!/usr/bin/env python3\n# a comment between\n"
                      "#TPUQ --chips 1 --time 2h\n#TPUQ --name from-script\n\n"
                      "print('trained')\n#TPUQ --priority 7\n")
    job = stack.submit("--name", "from-cli", str(script), cwd=tmp_path)
    row = stack.job(job)
    assert (row.chips, row.time_limit_s, row.name, row.priority) == (1, 7200.0, "from-cli", 0)
    shown = stack.tpuq("show", str(job)).stdout
    assert "option    --chips from #TPUQ" in shown and "option    --time from #TPUQ" in shown
    assert "option    --name from command line" in shown
    stack.wait_state(job, "succeeded")
    env_wins = stack.submit(str(script), cwd=tmp_path, TPUQ_CHIPS="2")
    assert stack.job(env_wins).chips == 2
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/sh\n#TPUQ --chips lots\ntrue\n")
    bad.chmod(0o755)
    r = stack.tpuq("submit", str(bad), check=False)
    assert r.returncode == 2 and "#TPUQ --chips lots" in r.stderr and "Traceback" not in r.stderr


def test_notify_start_tells_of_each_start(stack, host):
    stack.start_agent(host, TPUQ_NOTIFY_POLL_S="0.1", TPUQ_NOTIFY_ALLOW="127.0.0.1")
    with webhook() as (hook, hport):
        job = stack.submit("--notify", "start", "--notify-to", f"json://127.0.0.1:{hport}/s",
                           "--", "/bin/true")
        stack.wait_state(job, "succeeded")
        (got,) = hook.wait(1)
        assert got["body"]["title"] == f"tpuq: job {job} true started"
        wait_for(lambda: [n["event"] for n in json.loads(
            stack.tpuq("show", "--json", str(job)).stdout)["notifications"]] == ["started"],
            what="only the start is told")
