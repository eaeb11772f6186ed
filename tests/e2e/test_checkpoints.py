"""A job's checkpoints follow it across hosts (docs/checkpoints.md).

Team deployment, two hosts, each agent with a TPUQ_HOME of its own (as two VMs have): a
host-local checkpoint is on one host's disk only. A directory both agents share stands
for an NFS mount. The job is examples/train.py, a deterministic JAX training loop that
checkpoints every 5 steps and resumes from its checkpoint: a resumed run ends with the
very bytes of an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from tests.e2e.conftest import TRAIN_ARGS
from tests.harness import ROOT, FakeHost, Stack, step_delay, wait_for

pytestmark = [pytest.mark.team, pytest.mark.jax]


def two_hosts(stack: Stack, tmp_path: Path, **env: str) -> tuple[FakeHost, FakeHost, dict]:
    a = FakeHost(tmp_path / "a", name="tpu-a", chips=4)
    b = FakeHost(tmp_path / "b", name="tpu-b", chips=4)
    homes = {h.name: {"TPUQ_HOME": str(tmp_path / f"home-{h.name}"),
                      "TPUQ_AGENT_SOCKET": str(tmp_path / f"{h.name}.sock"), **env}
             for h in (a, b)}
    return a, b, homes


def submit_train(stack: Stack, tmp_path: Path, on: str, *opts: str) -> tuple[int, Path]:
    out = tmp_path / "hash.txt"
    job = stack.submit(*opts, "--", "python", str(ROOT / "examples" / "train.py"), *TRAIN_ARGS,
                       "--step-delay", step_delay("train.py"), "--out", str(out),
                       cwd=tmp_path, TPUQ_AGENT_SOCKET=str(tmp_path / f"{on}.sock"))
    return job, out


def log_of(stack: Stack, job: int, n: int) -> str:
    """Attempt n's log, as far as it is written ("" before it starts)."""
    atts = stack.attempts(job)
    path = atts[n - 1].log_path if len(atts) >= n else None
    return Path(path).read_text() if path and Path(path).exists() else ""


def whereabouts(stack: Stack, job: int) -> str:
    """What a timed-out wait shows: the job's state, its attempts, its log's tail."""
    atts = stack.attempts(job)
    return (f"job {job} {stack.job(job).state}: attempts "
            f"{[(a.number, a.host, a.outcome, a.reason) for a in atts]}\n"
            f"{log_of(stack, job, len(atts))[-1500:] if atts else ''}")


def checkpointed(stack: Stack, job: int) -> int:
    """The step of the last checkpoint attempt 1 wrote (its log says so)."""
    steps = re.findall(r"checkpoint at step (\d+)", log_of(stack, job, 1))
    return int(steps[-1]) if steps else 0


def pause_job(stack: Stack, job: int) -> None:
    """Stop the job's process group where it is (SIGSTOP), so that starting the second
    agent, however slowly on a loaded machine, cannot outlast the rest of the run: the
    host's death then always comes mid-run, after the checkpoints already seen."""
    os.killpg(stack.attempts(job)[-1].pid, signal.SIGSTOP)


def kill_host(stack: Stack, host: FakeHost, job: int) -> None:
    """The host dies: its agent, its keepers and the job's process group."""
    next(a for a in stack.agents if a.host is host).kill()
    stack.kill_keepers(host)
    pid = stack.attempts(job)[-1].pid
    if pid:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def move_mid_run(stack: Stack, job: int, a: FakeHost, b: FakeHost, homes: dict,
                 host_local: bool = True) -> int:
    """Once tpu-b's job has checkpointed a few steps: pause it there, start tpu-a's agent,
    kill tpu-b; the step of the last checkpoint tpu-b wrote. `host_local`: also once
    tpu-b's agent has recorded that the job's checkpoints are on its disk (it does so
    with a lease renewal; before that, the job is free to start over elsewhere)."""
    wait_for(lambda: checkpointed(stack, job) >= 5, 120, "a few checkpoints on tpu-b",
             on_timeout=lambda: whereabouts(stack, job))
    if host_local:
        wait_for(lambda: stack.job(job).checkpoint_seen_at is not None, 60,
                 "tpu-b's agent to record the checkpoints on its disk",
                 on_timeout=lambda: whereabouts(stack, job))
    pause_job(stack, job)
    stack.start_agent(a, **homes["tpu-a"])
    kill_host(stack, b, job)
    return checkpointed(stack, job)


def test_a_shared_root_lets_a_job_resume_on_another_host_bit_identical(
        team_stack, tmp_path, reference_hash):
    nfs = tmp_path / "nfs"
    nfs.mkdir()
    team_stack.extra["TPUQ_CHECKPOINT_ROOT"] = str(nfs)
    a, b, homes = two_hosts(team_stack, tmp_path)
    team_stack.start_agent(b, **homes["tpu-b"])
    job, out = submit_train(team_stack, tmp_path, "tpu-b")
    saved = move_mid_run(team_stack, job, a, b, homes, host_local=False)
    team_stack.wait_state(job, "succeeded", timeout=180)
    first, second = team_stack.attempts(job)
    assert (first.host, second.host) == ("tpu-b", "tpu-a")
    assert f"resumed from step {saved}" in log_of(team_stack, job, 2), "at its step"
    assert out.read_text().strip() == reference_hash("train.py")
    shown = json.loads(team_stack.tpuq("show", "--json", str(job)).stdout)
    assert shown["checkpoint_dir"].startswith(str(nfs) + "/")
    assert shown["checkpoint_host"] is None and second.started_over is None
    assert "(shared: the same on every host)" in team_stack.tpuq("show", str(job)).stdout


def test_host_local_checkpoints_wait_for_their_host_and_resume_there(
        team_stack, tmp_path, reference_hash):
    team_stack.extra["TPUQ_CHECKPOINT_WAIT_S"] = "300"
    a, b, homes = two_hosts(team_stack, tmp_path)
    agent_b = team_stack.start_agent(b, **homes["tpu-b"])
    job, out = submit_train(team_stack, tmp_path, "tpu-b")
    saved = move_mid_run(team_stack, job, a, b, homes)
    status = lambda: json.loads(team_stack.tpuq("status", "--json",  # noqa: E731
                                                 TPUQ_AGENT_SOCKET=homes["tpu-a"][
                                                     "TPUQ_AGENT_SOCKET"]).stdout)
    waiting = wait_for(lambda: next((j["waiting_for"] for j in status() if j["id"] == job
                                     and j["state"] == "queued"), None), 60,
                       "the job to wait for its host")
    assert waiting.startswith("waiting for tpu-b, which holds its checkpoints"), waiting
    assert next(j for j in status() if j["id"] == job)["checkpoint_host"] == "tpu-b"
    assert len(team_stack.attempts(job)) == 1, "not started over on the free host"
    agent_b.start()  # the host is back within the window
    team_stack.wait_state(job, "succeeded", timeout=180)
    assert [at.host for at in team_stack.attempts(job)] == ["tpu-b", "tpu-b"], \
        [(at.number, at.host, at.outcome, at.reason) for at in team_stack.attempts(job)]
    assert f"resumed from step {saved}" in log_of(team_stack, job, 2)
    assert out.read_text().strip() == reference_hash("train.py")


def test_host_local_checkpoints_not_back_in_time_start_over_elsewhere_and_say_so(
        team_stack, tmp_path, reference_hash):
    from tests.fakes.receivers import webhook

    # the receiver below listens on loopback, which destinations refuse unless allowed
    team_stack.extra.update(TPUQ_CHECKPOINT_WAIT_S="2", TPUQ_NOTIFY_POLL_S="0.1",
                            TPUQ_NOTIFY_ALLOW="127.0.0.1")
    a, b, homes = two_hosts(team_stack, tmp_path)
    team_stack.start_agent(b, **homes["tpu-b"])
    with webhook() as (hook, port):
        chat = f"json://127.0.0.1:{port}/hook"
        job, out = submit_train(team_stack, tmp_path, "tpu-b", "--notify", "end",
                                "--notify-to", chat)
        move_mid_run(team_stack, job, a, b, homes)
        team_stack.wait_state(job, "succeeded", timeout=180)
        words = "checkpoint on tpu-b not reachable from tpu-a: starting over"
        first, second = team_stack.attempts(job)
        assert (first.host, second.host, second.started_over) == ("tpu-b", "tpu-a", words)
        assert "resumed from step" not in log_of(team_stack, job, 2)
        assert out.read_text().strip() == reference_hash("train.py"), "from the start"
        shown = team_stack.tpuq("show", str(job)).stdout
        assert f"started over: {words}" in shown
        assert "tpu-a:" in shown and "(on that host's disk only)" in shown
        logs = team_stack.tpuq("logs", str(job), "--attempt", "2")
        first_line = next(ln for ln in logs.stdout.splitlines() if not ln.startswith("==>"))
        assert first_line == f"[tpuq: {words}]", logs.stdout[:300]
        told = [m for m in hook.wait(2) if "starts over" in json.dumps(m)]
        assert told and words in json.dumps(told[0]["body"])
