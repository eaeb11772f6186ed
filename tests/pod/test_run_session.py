"""`tpuq run` from a laptop: no agent there, the team deployment's database and broker; once
the scheduler has chosen the session's host, the laptop's real OpenSSH client reaches that
host's real sshd (tests/pod/fakepod.py), whose login runs `tpuq run --attach` against the
host's agent. Driven through a real pty (pexpect): what is typed there runs on the host,
and the laptop's `tpuq run` exits with the session's status."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tests.harness import FakeHost, Stack
from tests.pod.fakepod import FakePod, have_sshd

pytestmark = pytest.mark.pod

TPUQ = str(Path(sys.executable).parent / "tpuq")
BASH = ["bash", "--norc", "--noprofile", "-i"]
LAPTOP = Path(__file__).resolve().parent / "laptop"  # its `ssh`: the real client, -F config


@pytest.fixture
def tpu_vm(tmp_path: Path) -> Iterator[FakePod]:
    """One sshd: the TPU VM a laptop logs in to."""
    if not have_sshd():
        pytest.fail("tpuq pod tests need /usr/sbin/sshd, unshare and root (.ci/run installs "
                    "openssh-server)")
    vm = FakePod(tmp_path / "vm", size=1)
    try:
        yield vm.start()
    finally:
        vm.close()


def login_profile(vm: FakePod, env: dict[str, str]) -> None:
    """/etc/profile.d/tpuq.sh of the VM (its own /etc): the deployment a login there
    uses, as `tpuq run`'s remote command reads it before it runs the VM's tpuq."""
    (w,) = vm.workers
    assert w.proc is not None
    text = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items())
                   if k.startswith("TPUQ_"))
    subprocess.run(["nsenter", "-t", str(w.proc.pid), "-m", "sh", "-c",
                    "mkdir -p /etc/profile.d && cat > /etc/profile.d/tpuq.sh"],
                   input=text, text=True, check=True, timeout=30)


def ssh_config(vm: FakePod, host: str) -> Path:
    """The laptop's ~/.ssh/config: the VM under the name `tpuq status` shows."""
    (w,) = vm.workers
    path = vm.root / "laptop_ssh_config"
    path.write_text(f"Host {host}\n  HostName {w.addr}\n  Port {vm.port}\n  User root\n"
                    f"  IdentityFile {vm.key}\n  IdentitiesOnly yes\n  BatchMode yes\n"
                    "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
                    "  LogLevel ERROR\n")
    return path


def test_a_laptop_reaches_its_session_over_real_ssh(team_stack: Stack, host: FakeHost,
                                                    tpu_vm: FakePod, tmp_path: Path) -> None:
    team_stack.start_agent(host)
    login_profile(tpu_vm, team_stack.env(host))
    laptop = {**team_stack.env(TERM="xterm"),
              "TPUQ_AGENT_SOCKET": str(tmp_path / "no-agent.sock"),  # no agent here
              "PATH": f"{LAPTOP}{os.pathsep}{team_stack.env()['PATH']}",
              "TPUQ_TEST_SSH_CONFIG": str(ssh_config(tpu_vm, host.name))}
    child = pexpect.spawn(TPUQ, ["run", "--chips", "1", "--", *BASH], env=laptop,
                          encoding="utf-8", timeout=60, dimensions=(24, 80))
    try:
        child.expect(rf"session (\d+) runs on {host.name}: attaching over SSH "
                     rf"\(ssh -t {host.name} tpuq run --attach \d+\)")
        job_id = int(child.match.group(1))
        child.expect(rf"session {job_id} starts on {host.name}")  # said on the VM
        child.sendline("PS1='[re''ady]$ '")
        child.expect(r"\[ready\]\$ ")
        child.sendline("echo on' 'the vm $TPUQ_JOB_ID chips=$TPU_VISIBLE_CHIPS")
        child.expect(rf"on the vm {job_id} chips=(\S+)")
        assert len(child.match.group(1).split(",")) == 1
        # the terminal reached the agent through a login of the VM's sshd
        attaching = [p for p in tpu_vm.session_pids()
                     if f"--attach\0{job_id}" in Path(f"/proc/{p}/cmdline").read_text()]
        assert attaching, "no `tpuq run --attach` under the VM's sshd"
        child.sendline("stty size")
        child.expect(r"24 80")  # the laptop's window, through ssh -t's pty
        child.sendline("exit 6")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 6, child.before
    job = team_stack.wait_state(job_id, "failed")
    assert job.exit_code == 6 and job.host == host.name
