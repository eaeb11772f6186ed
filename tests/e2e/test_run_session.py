"""`tpuq run`: an interactive session on a real agent, driven through a real pty (pexpect)
on both deployments: it waits in the queue, then runs on the caller's terminal (echo,
Ctrl-C, window size), exits with the command's status, is a job in status and history,
is told before its time limit and a stop, and is stopped when its terminal goes away."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path

import pexpect
import pytest

from tests.harness import FIXTURES, Stack, wait_for
from tpuq import localclient, protocol

TPUQ = str(Path(sys.executable).parent / "tpuq")
BASH = ["bash", "--norc", "--noprofile", "-i"]
READY = r"\[ready\]\$ "  # the prompt; typed as '[re''ady]$ ' so its echo never matches


def run(stack: Stack, *args: str, env: dict[str, str] | None = None) -> pexpect.spawn:
    child = pexpect.spawn(TPUQ, ["run", *args], env={**stack.env(TERM="xterm"), **(env or {})},
                          encoding="utf-8", timeout=20, dimensions=(24, 80))
    return child


def shell(stack: Stack, *args: str, env: dict[str, str] | None = None) -> pexpect.spawn:
    """`tpuq run ARGS -- bash`, at its first prompt."""
    child = run(stack, *args, "--", *BASH, env=env)
    child.expect(r"session \d+ starts on tpu-a")
    child.sendline("PS1='[re''ady]$ '")
    child.expect(READY)
    return child


def session_id(stack: Stack) -> int:
    jobs = json.loads(stack.tpuq("status", "--json").stdout)
    return max(j["id"] for j in jobs)


def test_a_shell_runs_on_the_callers_terminal_and_exits_with_its_status(stack, host):
    stack.start_agent(host)
    child = shell(stack, "--chips", "2")
    child.sendline("echo chips=$TPU_VISIBLE_CHIPS job=$TPUQ_JOB_ID term=$TERM")
    child.expect(r"chips=(\S+) job=(\d+) term=(\S+)")
    chips, job, term = child.match.groups()
    assert len(chips.split(",")) == 2 and term == "xterm"
    job_id = int(job)
    child.sendline("echo typed' 'here")
    child.expect_exact("echo typed' 'here")  # the terminal echoes what was typed
    child.expect_exact("typed here")
    child.sendline("stty size")
    child.expect(r"24 80")
    child.setwinsize(40, 120)
    child.sendline("stty size")
    child.expect(r"40 120")
    # Ctrl-C reaches the shell's foreground job as SIGINT; the session goes on
    child.sendline("sleep 60; echo slept")
    child.expect_exact("sleep 60")
    wait_for(lambda: _has_child_sleep(stack, job_id), 10, "the sleep to run")
    child.sendintr()
    child.expect(READY, timeout=10)
    status = stack.tpuq("status", "--json").stdout
    assert {"id": job_id, "state": "running", "session": True}.items() <= next(
        j for j in json.loads(status) if j["id"] == job_id).items()
    child.sendline("exit 7")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 7
    job_row = stack.wait_state(job_id, "failed")
    assert job_row.exit_code == 7
    ended = json.loads(stack.tpuq("history", "--json").stdout)
    assert any(j["id"] == job_id and j["state"] == "failed" for j in ended)


def _has_child_sleep(stack: Stack, job_id: int) -> bool:
    pid = stack.attempts(job_id)[-1].pid
    from tpuq.agent.keeper.process import session_members

    return pid is not None and any(
        Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"sleep")
        for p in session_members(pid) if Path(f"/proc/{p}").exists())


def test_a_process_that_left_the_session_does_not_keep_the_caller_waiting(stack, host):
    stack.start_agent(host)
    child = shell(stack)
    job_id = session_id(stack)
    child.sendline("setsid sleep 301 & exit 6")  # a new session holds the terminal still
    try:
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 6
        assert stack.job(job_id).state == "failed"
    finally:
        for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x00301\x00":
                    os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass


def test_success_exits_zero_and_a_closed_terminal_stops_the_session(stack, host):
    stack.start_agent(host)
    child = run(stack, "--", "sh", "-c", "exit 0")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    child = shell(stack)
    job_id = session_id(stack)
    stack.wait_process(job_id)
    child.kill(signal.SIGHUP)  # the terminal window is closed
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 129
    job = stack.wait_state(job_id, "cancelled", "failed", timeout=20)
    assert job.state == "cancelled", job.reason
    assert not stack.leftovers(("bash", "--norc", "--noprofile"))


def test_it_waits_saying_why_while_another_job_holds_the_chips(stack, host):
    stack.start_agent(host)
    blocker = stack.submit("--", "sleep", "60")
    stack.wait_process(blocker)
    child = run(stack, "--chips", "4", "--", *BASH)
    child.expect(r"session (\d+) waits: (.+?) \(waited \d+s\)")
    job_id = int(child.match.group(1))
    assert stack.job(job_id).state == "queued"
    child.expect(r"waited [1-9]\d*s")  # the wait is counted as it goes
    stack.tpuq("cancel", str(blocker))
    child.expect(rf"session {job_id} starts on tpu-a")
    child.sendline("exit 3")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 3


def test_the_session_is_told_before_its_time_limit_and_a_stop_and_is_not_requeued(
        stack, host, metadata):
    stack.start_agent(host, TPUQ_METADATA_URL=metadata.url)
    child = shell(stack, "--time", "4s", "--grace", "1s")
    job_id = session_id(stack)
    child.expect(r"reaches its time limit \(4s\) in 1s; then it gets SIGHUP", timeout=10)
    child.expect(r"reached its time limit \(--time\): it gets SIGHUP now", timeout=10)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 129  # bash's own status after SIGHUP
    assert stack.wait_state(job_id, "timeout").attempt == 1
    child = shell(stack)
    job_id = session_id(stack)
    stack.wait_process(job_id)
    stack.tpuq("preempt", str(job_id))
    child.expect(r"the host is preempted: it gets SIGHUP now")
    child.expect(pexpect.EOF)
    child.close()
    job = stack.wait_state(job_id, "failed")
    assert "a session is not requeued" in (job.reason or "") and job.attempt == 1
    # the platform's maintenance notice: said in the session, with its words, then the stop
    child = shell(stack)
    job_id = session_id(stack)
    stack.wait_process(job_id)
    metadata.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    child.expect(r"the host is preempted \(.*maintenance-event TERMINATE_ON_HOST_MAINTENANCE.*\): "
                 r"it gets SIGHUP now")
    child.expect(pexpect.EOF)
    child.close()
    job = stack.wait_state(job_id, "failed")
    assert "a session is not requeued" in (job.reason or "") and job.attempt == 1


def test_off_the_host_it_attaches_over_ssh_or_says_what_to_run_there(stack, host, tmp_path):
    stack.start_agent(host)
    if stack.deployment == "embedded":  # type: ignore[attr-defined]
        pytest.skip("off the host is the team deployment's")
    ssh_log = tmp_path / "ssh.log"
    laptop = {"TPUQ_AGENT_SOCKET": str(tmp_path / "no-agent.sock"),  # no agent here
              "PATH": f"{FIXTURES / 'ssh'}{os.pathsep}{stack.env()['PATH']}",
              "TPUQ_TEST_SSH_LOG": str(ssh_log)}
    child = run(stack, "--", *BASH, env=laptop)
    child.expect(r"session (\d+) runs on tpu-a: attaching over SSH "
                 r"\(ssh -t tpu-a tpuq run --attach (\d+)\)")
    job_id = int(child.match.group(1))
    child.expect(rf"session {job_id} starts on tpu-a")  # what tpuq says on the host
    child.sendline("echo on' 'the host $TPUQ_JOB_ID")
    child.expect(f"on the host {job_id}")
    child.sendline("exit 4")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 4
    assert ssh_log.read_text().startswith("-t tpu-a ")
    # --no-ssh: it says what to run there, and the first one exits with the session
    child = run(stack, "--no-ssh", "--", *BASH, env=laptop)
    child.expect(r"session (\d+) runs on tpu-a; attach this terminal there: "
                 r"ssh -t tpu-a tpuq run --attach (\d+)")
    job_id = int(child.match.group(1))
    there = run(stack, "--attach", str(job_id))  # what the caller runs on tpu-a
    there.sendline("echo on' 'the host $TPUQ_JOB_ID")
    there.expect(f"on the host {job_id}")
    there.sendline("exit 5")
    there.expect(pexpect.EOF)
    there.close()
    assert there.exitstatus == 5
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 5


def test_only_the_owner_hands_a_terminal_to_its_session_and_nothing_else_takes_fds(
        stack, host):
    agent = stack.start_agent(host)
    plain = stack.submit("--hold", "--", "/bin/true")
    sock = _socket_path(stack)
    master, slave = os.openpty()
    try:
        # the socket's caller is whom the kernel says (root here), not the job's owner
        reply = localclient.call(sock, protocol.AttachTerminal(id=plain), fds=[slave])
        assert isinstance(reply, protocol.Refusal) and reply.error == f"no session {plain} of yours"
        reply = localclient.call(sock, protocol.AttachTerminal(id=plain, as_user="tester"),
                                 fds=[slave])
        assert isinstance(reply, protocol.Refusal) and "not a session" in reply.error
        reply = localclient.call(sock, protocol.AttachTerminal(id=plain, as_user="tester"))
        assert isinstance(reply, protocol.Refusal) and "one terminal" in reply.error
        before = len(os.listdir(f"/proc/{agent.pid}/fd"))
        for _ in range(20):  # descriptors sent with any other request are closed at once
            a, b = socket.socketpair()
            assert isinstance(localclient.call(sock, protocol.Ping(), fds=[a.fileno()]),
                              protocol.Pong)
            a.close()
            b.close()
        assert len(os.listdir(f"/proc/{agent.pid}/fd")) <= before + 2
    finally:
        os.close(master)
        os.close(slave)


def _socket_path(stack: Stack) -> str:
    from tpuq.settings import load

    env = stack.env()
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        return load().socket_path
    finally:
        os.environ.clear()
        os.environ.update(saved)
