"""TPUQ_RUN_AS=owner: a root agent starts each job as its owner's local account."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.harness import ROOT, TPUQ, FakeHost

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="starting a job as another user needs root")
OWNER = "nobody"  # an account every Debian and Ubuntu machine has


def test_a_job_runs_as_its_owner_and_owns_what_it_writes(open_stack, tmp_path):
    stack = open_stack
    stack.start_agent(FakeHost(tmp_path / "host-a"), TPUQ_RUN_AS="owner")
    script = ('id -u; id -g; echo "$HOME $USER $LOGNAME"; '
              'touch "$TPUQ_CHECKPOINT_DIR/step-1"; echo "{}" >> "$TPUQ_PROGRESS_FILE"')
    job_id = stack.submit("--", "/bin/sh", "-c", script, cwd="/", TPUQ_USER=OWNER)
    stack.wait_state(job_id, "succeeded")
    pw = pwd.getpwnam(OWNER)
    assert stack.log_text(job_id).splitlines()[:3] == [
        str(pw.pw_uid), str(pw.pw_gid), f"{pw.pw_dir} {OWNER} {OWNER}"]
    ckpt = stack.checkpoint_dir(job_id)
    assert (ckpt.stat().st_uid, (ckpt / "step-1").stat().st_uid) == (pw.pw_uid, pw.pw_uid)


def test_an_owner_without_an_account_here_fails_with_the_reason(open_stack, tmp_path):
    stack = open_stack
    stack.start_agent(FakeHost(tmp_path / "host-a"), TPUQ_RUN_AS="owner")
    job_id = stack.submit("--", "/bin/true", cwd="/", TPUQ_USER="no-such-person")
    job = stack.wait_state(job_id, "failed")
    assert "no local account 'no-such-person'" in job.reason


def test_a_root_agent_runs_jobs_as_itself_by_default(open_stack, tmp_path):
    stack = open_stack
    stack.start_agent(FakeHost(tmp_path / "host-a"))
    job_id = stack.submit("--", "id", "-u", cwd="/", TPUQ_USER=OWNER)
    stack.wait_state(job_id, "succeeded")
    assert stack.log_text(job_id).strip() == "0"


def test_the_kernel_not_the_request_names_whom_a_socket_submit_runs_as(open_stack, tmp_path):
    """A user on the host who claims to be someone else (TPUQ_USER) through the agent's
    socket still gets a job of their own, run as themselves."""
    stack = open_stack
    stack.start_agent(FakeHost(tmp_path / "host-a"), TPUQ_RUN_AS="owner")
    pw = pwd.getpwnam(OWNER)
    as_owner = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    # the test's interpreter may lie where only root can reach it (a pyenv under /root)
    path = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])
    python = next((exe for exe in (sys.executable, "/usr/bin/python3")
                   if runs_as(OWNER, [exe, "-c", "import click, tpuq"], PYTHONPATH=path)), None)
    if python is None:
        pytest.skip(f"no Python here that {OWNER} may run with tpuq importable")
    r = subprocess.run([python, *TPUQ[1:], "submit", "-q", "--", "id", "-u"], cwd="/",
                       text=True, capture_output=True, timeout=60, check=False, **as_owner,
                       env=stack.env(TPUQ_USER="root", PYTHONPATH=path))
    assert r.returncode == 0, r.stderr
    job = stack.wait_state(int(r.stdout), "succeeded")
    assert job.owner == OWNER
    assert stack.log_text(job.id).strip() == str(pw.pw_uid)


def test_owner_mode_runs_no_job_as_root(open_stack, tmp_path):
    stack = open_stack
    stack.start_agent(FakeHost(tmp_path / "host-a"), TPUQ_RUN_AS="owner")
    job_id = stack.submit("--", "id", "-u", cwd="/", TPUQ_USER="root")
    assert "runs no job as root" in stack.wait_state(job_id, "failed").reason


def test_the_job_enters_its_directory_as_its_owner(open_stack, tmp_path):
    """A directory its owner may not enter stays closed: the agent (root) does not
    change into it on the job's behalf."""
    stack = open_stack
    stack.start_agent(FakeHost(tmp_path / "host-a"), TPUQ_RUN_AS="owner")
    closed = Path(stack.home, "closed")
    closed.mkdir(mode=0o700)
    job_id = stack.submit("--", "ls", cwd=closed, TPUQ_USER=OWNER)
    job = stack.wait_state(job_id, "failed")
    assert "cannot change directory" in stack.log_text(job_id), stack.log_text(job_id)
    assert job.exit_code == 125


def runs_as(owner: str, argv: list[str], **env: str) -> bool:
    pw = pwd.getpwnam(owner)
    try:
        return subprocess.run(argv, env=env, capture_output=True, check=False, user=pw.pw_uid,
                              group=pw.pw_gid, extra_groups=[], timeout=60).returncode == 0
    except OSError:  # not executable for that account
        return False


def test_output_is_written_as_the_owner_where_the_owner_may_write(open_stack, tmp_path):
    """--output in owner mode: the root agent writes the file as the job's owner, so it
    lands only where the owner may write, and is the owner's."""
    import tempfile

    stack = open_stack
    stack.start_agent(FakeHost(tmp_path / "host-a"), TPUQ_RUN_AS="owner")
    pw = pwd.getpwnam(OWNER)
    with tempfile.TemporaryDirectory(dir="/tmp") as where:  # pytest's are root's alone
        Path(where).chmod(0o755)
        theirs, roots = Path(where) / "theirs", Path(where) / "roots"
        theirs.mkdir()
        os.chown(theirs, pw.pw_uid, pw.pw_gid)
        roots.mkdir(mode=0o755)
        ok = stack.submit("--output", f"{theirs}/%j.out", "--", "echo", "hi", cwd="/",
                          TPUQ_USER=OWNER)
        refused = stack.submit("--output", f"{roots}/%j.out", "--", "echo", "hi", cwd="/",
                               TPUQ_USER=OWNER)
        stack.wait_all([ok, refused], "succeeded")
        assert "--output" not in stack.log_text(ok), stack.log_text(ok)
        out = theirs / f"{ok}.out"
        assert out.read_text() == "hi\n" and out.stat().st_uid == pw.pw_uid
        assert not (roots / f"{refused}.out").exists(), "root's directory is not the owner's"
        assert "Permission denied" in stack.log_text(refused)
