"""Ctrl-C on a command that waits for a job (`submit --wait`, `wait`, `logs -f`): the
real process gets SIGINT, says which job goes on and how to cancel it, and exits 130;
with --cancel-on-interrupt it cancels the job. Both deployments."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.harness import TPUQ, wait_for


def start(stack, *args: str) -> subprocess.Popen[str]:  # type: ignore[no-untyped-def]
    return subprocess.Popen([*TPUQ, *args], env=stack.env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def asking(proc: subprocess.Popen[str], stack) -> bool:  # type: ignore[no-untyped-def]
    """The process has reached its queue: its database file (embedded) or a connection
    (the team's PostgreSQL) is open, so it is in its waiting loop."""
    fd_dir = Path(f"/proc/{proc.pid}/fd")
    try:
        links = [os.readlink(fd_dir / fd) for fd in os.listdir(fd_dir)]
    except (FileNotFoundError, ProcessLookupError):
        return False
    db = str(stack.home / "tpuq.db")
    return any(link == db or link.startswith("socket:") for link in links)


def interrupt(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


@pytest.mark.parametrize("cancel", [False, True], ids=["tells", "cancels"])
def test_submit_wait_interrupted(stack, cancel):
    proc = start(stack, "submit", "--hold", "--wait",
                 *(["--cancel-on-interrupt"] if cancel else []), "--", "true")
    line = proc.stdout.readline() if proc.stdout else ""
    job_id = int(line.split()[2])  # "submitted job N (held)"
    wait_for(lambda: asking(proc, stack), what="the wait loop")
    code, err = interrupt(proc)
    assert code == 130 and "Traceback" not in err
    if cancel:
        assert f"job {job_id} cancelled" in err
        assert stack.job(job_id).state == "cancelled"
    else:
        assert f"job {job_id} goes on" in err and f"`tpuq cancel {job_id}`" in err
        assert stack.job(job_id).state == "held"
    assert "aborted" not in err


@pytest.mark.parametrize("command", [["wait"], ["logs", "-f"]], ids=["wait", "logs-f"])
def test_wait_and_follow_interrupted(stack, command):
    job_id = stack.submit("--hold", "--", "true")
    proc = start(stack, *command, str(job_id))
    wait_for(lambda: asking(proc, stack), what="the wait loop")
    code, err = interrupt(proc)
    assert code == 130 and len(err.splitlines()) == 1, err
    assert f"`tpuq cancel {job_id}`" in err and stack.job(job_id).state == "held"

    proc = start(stack, *command, "--cancel-on-interrupt", str(job_id))
    wait_for(lambda: asking(proc, stack), what="the wait loop")
    code, err = interrupt(proc)
    assert code == 130 and f"job {job_id} cancelled" in err
    assert stack.job(job_id).state == "cancelled"
