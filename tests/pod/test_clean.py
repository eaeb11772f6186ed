"""`tpuq pod clean`: every worker's TPU freed safely, through its agent where one runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import FIXTURES, Stack
from tests.pod.fakepod import SHIMS, FakePod, is_running
from tpuq.protocol import CleanTpu, Failure, Refusal, TpuCleaned


def hold(device: str, **env: str) -> subprocess.Popen[str]:
    """A process holding a TPU device file open until its stdin closes."""
    p = subprocess.Popen([sys.executable, str(FIXTURES / "hold_device.py"), device],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, **env})
    assert p.stdout is not None and p.stdout.readline() == "holding\n"
    return p


@pytest.mark.pod
def test_clean_names_holders_and_removes_only_stale_locks(fake_pod: FakePod) -> None:
    w0, w1, w2 = fake_pod.workers
    # w2 runs its agent (embedded); the remote cleaner finds it on its socket
    stack = Stack(home=w2.root / "h")
    stack.start_agent(w2.host)
    holders: list[subprocess.Popen[str]] = []
    try:
        # w0: a process tpuq did not start holds chip 0; its lock must stay
        holders.append(hold(str(w0.host.dev / "accel0")))
        # w2: an orphan of an earlier attempt on that host holds chip 1
        holders.append(hold(str(w2.host.dev / "accel1"), TPUQ_HOST="pod-test-w2",
                            TPUQ_JOB_ID="99", TPUQ_ATTEMPT="1",
                            TPUQ_CHECKPOINT_DIR=str(stack.home / "checkpoints" / "x" / "99")))
        for w in fake_pod.workers:
            w.host.lockfile.write_text("")  # what a crashed libtpu leaves
        hosts = str(fake_pod.hosts_file())
        r = fake_pod.tpuq("pod", "clean", "--hosts", hosts, "--json",
                          "--remote-tpuq", str(SHIMS / "tpuq"))
        assert r.returncode == 5, r.stderr  # a TPU is still held: w0's
        got = {x["name"]: x for x in json.loads(r.stdout)}
        assert got["w0"]["via"] == "direct" and not got["w0"]["free"]
        (held,) = got["w0"]["holders"]
        assert (held["pid"], held["user"], held["what"]) == (holders[0].pid, "root", "foreign")
        assert "hold_device.py" in held["command"]
        assert got["w0"]["removed"] == [] and w0.host.lockfile.exists()
        assert got["w1"]["via"] == "direct" and got["w1"]["free"]
        assert got["w1"]["removed"] == [str(w1.host.lockfile)] and not w1.host.lockfile.exists()
        assert got["w2"]["via"] == "agent" and got["w2"]["free"]
        assert [k["pid"] for k in got["w2"]["killed"]] == [holders[1].pid]
        assert not is_running(holders[1].pid)
        assert got["w2"]["removed"] == [str(w2.host.lockfile)]

        # in words; once the holder is gone, w0's stale lock goes too
        assert holders[0].stdin is not None
        holders[0].stdin.close()
        holders[0].wait(10)
        r = fake_pod.tpuq("pod", "clean", "--hosts", hosts, "--remote-tpuq", str(SHIMS / "tpuq"))
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].startswith("w0   127.0.0.1") and "(direct) TPU free; removed stale" in lines[0]
        assert "(agent) TPU free" in lines[2]
        assert not w0.host.lockfile.exists()

        # a job the agent runs keeps the lock, whether or not it holds a device yet
        job = stack.submit("--", "sleep", "60")
        stack.wait_process(job)
        w2.host.lockfile.write_text("")
        r = fake_pod.tpuq("pod", "clean", "--hosts", w2.addr, "--listed-only", "--json",
                          "--remote-tpuq", str(SHIMS / "tpuq"))
        assert r.returncode == 5, r.stderr
        (only,) = json.loads(r.stdout)
        assert only["jobs"] == [f"job {job} attempt 1"] and only["removed"] == []
        assert w2.host.lockfile.exists()
    finally:
        for p in holders:
            p.kill()
            p.wait(10)
        stack.cleanup()


@pytest.mark.pod
def test_clean_says_where_tpuq_is_missing_or_a_worker_is_away(fake_pod: FakePod) -> None:
    hosts = f"{fake_pod.workers[0].addr},127.0.0.9"
    r = fake_pod.tpuq("pod", "clean", "--hosts", hosts, "--remote-tpuq", "/nonexistent/tpuq")
    assert r.returncode == 1
    assert "w0   127.0.0.1                error: tpuq is not installed there" in r.stdout
    assert "w1   127.0.0.9                error: cannot connect" in r.stdout


def test_only_an_admin_may_ask_an_agent_to_free_its_tpu(tmp_path: Path) -> None:
    """The request kills processes: root and the agent's own user are admins on the
    host, anyone else only if the deployment's admins table says so."""
    from tpuq.agent.local.api import LocalApi
    from tpuq.settings import Settings
    from tpuq.state.db import Database

    db = Database(f"sqlite:///{tmp_path}/tpuq.db")
    db.upgrade()
    freed = {"holders": [], "removed": ["/tmp/libtpu_lockfile"]}
    api = LocalApi(Settings(home=str(tmp_path)), db, on_submit=lambda: None,
                   on_change=lambda: None, free_tpu=lambda: freed)
    try:
        assert api.handle(CleanTpu(), uid=0) == TpuCleaned(report=freed)
        refused = api.handle(CleanTpu(deployment="another queue"), uid=54321)
        assert isinstance(refused, Refusal) and refused.kind is Failure.FORBIDDEN
        api.free_tpu = None
        assert api.handle(CleanTpu(), uid=0).kind is Failure.BAD_REQUEST  # type: ignore[attr-defined]
    finally:
        db.dispose()
