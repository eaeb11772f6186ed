"""TPUQ_RUN_AS=owner: a root agent starts each job as its owner's local account."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from tests.harness import FakeHost

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
    ckpt = Path(stack.home, "checkpoints", str(job_id))
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
