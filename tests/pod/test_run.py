"""`tpuq pod run` against real sshd workers: prefixed output, exit statuses, a timeout,
and fail-fast that really kills the other workers' processes."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness import TPUQ, wait_for
from tests.pod.fakepod import FakePod, is_running

pytestmark = pytest.mark.pod


def pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def test_output_is_prefixed_by_worker_and_each_exit_status_listed(fake_pod: FakePod) -> None:
    endpoints = ",".join(f"unknown:unknown:{w.addr}" for w in fake_pod.workers)
    md = fake_pod.workers[0].metadata  # host 0's metadata server names the pod
    md.set("instance/attributes/worker-network-endpoints", endpoints)
    r = fake_pod.tpuq("pod", "run", "--no-fail-fast", "--",
                      'echo "out of $TPUQ_TEST_WORKER"; echo "err of $TPUQ_POD_WORKER" >&2; '
                      'printf "no newline"; exit $((TPUQ_TEST_WORKER * 2))',
                      TPUQ_METADATA_URL=md.url)
    assert r.returncode == 2, r.stderr  # the lowest-numbered worker that failed: w1
    for i in range(3):
        # each worker ran where the metadata says, its lines whole and prefixed
        assert f"[w{i}] out of {i}\n" in r.stdout
        assert f"[w{i}] no newline\n" in r.stdout
        assert f"[w{i}] err of {i}\n" in r.stderr
    summary = {ln.split()[0]: ln.split()[2:5] for ln in r.stdout.splitlines()
               if ln.startswith("w")}
    assert summary == {"w0": ["ok", "exit", "0"], "w1": ["failed", "exit", "2"],
                       "w2": ["failed", "exit", "4"]}

    r = fake_pod.tpuq("pod", "run", "--json", "--no-fail-fast", "--hosts",
                      str(fake_pod.hosts_file()), "--", "echo hi; exit $TPUQ_TEST_WORKER")
    assert r.returncode == 1
    got = json.loads(r.stdout)  # the summary alone: the output went to stderr
    assert [(o["name"], o["host"], o["state"], o["exit_code"]) for o in got] == [
        ("w0", "127.0.0.1", "ok", 0), ("w1", "127.0.0.2", "failed", 1),
        ("w2", "127.0.0.3", "failed", 2)]
    assert "[w2] hi\n" in r.stderr


def test_fail_fast_kills_the_other_workers_processes(fake_pod: FakePod) -> None:
    """w0 fails once w1 and w2 run `sleep 300` (w1 also a daemon that left its process
    group): when `tpuq pod run` returns, none of them runs any more."""
    d = fake_pod.root
    command = (
        'if [ "$TPUQ_POD_WORKER" = 0 ]; then '
        f'  until [ -s {d}/pid.1 ] && [ -s {d}/pid.2 ]; do sleep 0.05; done; exit 3; '
        "fi; "
        'if [ "$TPUQ_POD_WORKER" = 1 ]; then setsid sleep 301 & echo $! >> ' f"{d}/daemon.1; fi; "
        f"sleep 300 & echo $! >> {d}/pid.$TPUQ_POD_WORKER; wait")
    began = time.monotonic()
    r = fake_pod.tpuq("pod", "run", "--hosts", str(fake_pod.hosts_file()), "--grace", "2s",
                      "--json", "--", command)
    assert time.monotonic() - began < 30
    assert r.returncode == 3, r.stderr
    states = {o["name"]: (o["state"], o["left"]) for o in json.loads(r.stdout)}
    assert states == {"w0": ("failed", 0), "w1": ("stopped", 0), "w2": ("stopped", 0)}
    victims = pids(d / "pid.1") + pids(d / "pid.2") + pids(d / "daemon.1")
    assert len(victims) == 3
    alive = [p for p in victims if is_running(p)]
    assert not alive, f"still running after fail-fast: {alive}"
    wait_for(lambda: not fake_pod.session_pids(), 10, "every session to end")


def test_timeout_stops_every_worker(fake_pod: FakePod) -> None:
    r = fake_pod.tpuq("pod", "run", "--hosts", str(fake_pod.hosts_file()), "--timeout", "1s",
                      "--grace", "1s", "--", f"sleep 300 & echo $! > {fake_pod.root}/t.$TPUQ_POD_WORKER;"
                      " wait")
    assert r.returncode == 124, r.stderr
    assert [ln.split()[2] for ln in r.stdout.splitlines()] == ["timeout"] * 3
    for i in range(3):
        (pid,) = pids(fake_pod.root / f"t.{i}")
        assert not is_running(pid)
    wait_for(lambda: not fake_pod.session_pids(), 10, "every session to end")


def as_on_a_terminal() -> None:
    """The dispositions a command typed at a terminal starts with: a suite started in
    the background (`nohup`, `&`) passes SIGINT and SIGHUP on ignored, and `pod run`
    keeps a signal it was started ignoring ignored, on purpose."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
def test_ctrl_c_or_a_closed_terminal_stops_every_worker(fake_pod: FakePod,
                                                         sig: signal.Signals) -> None:
    d = fake_pod.root
    p = subprocess.Popen([*TPUQ, "pod", "run", "--hosts", str(fake_pod.hosts_file()), "--",
                          f"sleep 300 & echo $! > {d}/c.$TPUQ_POD_WORKER; wait"],
                         env=fake_pod.env(), cwd=d, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=as_on_a_terminal)
    try:
        wait_for(lambda: all(pids(d / f"c.{i}") for i in range(3)), 20, "every worker to start")
        p.send_signal(sig)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert [ln.split()[2] for ln in out.splitlines()] == ["interrupted"] * 3
    assert not [pid for i in range(3) for pid in pids(d / f"c.{i}") if is_running(pid)]


def test_an_unreachable_worker_means_nothing_starts(fake_pod: FakePod) -> None:
    hosts = ",".join([*(w.addr for w in fake_pod.workers), "127.0.0.9"])
    r = fake_pod.tpuq("pod", "run", "--hosts", hosts, "--", f"touch {fake_pod.root}/ran.$TPUQ_POD_WORKER")
    assert r.returncode == 255
    assert "tpuq: error: w3 (127.0.0.9): cannot connect" in r.stderr
    assert "(nothing was started)" in r.stderr and "Traceback" not in r.stderr
    assert not list(fake_pod.root.glob("ran.*"))


def test_mistakes_are_one_line(fake_pod: FakePod, tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("10.0.0.2\n10.0.0.3 10.0.0.4\n")
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    hosts = str(fake_pod.hosts_file())
    cases = [
        (["--hosts", str(bad)], 2, f"tpuq: error: {bad}:2: one host per line"),
        (["--hosts", str(tmp_path / "none.txt")], 2, "tpuq: error: cannot read hosts file"),
        (["--hosts", "a,,b"], 2, "tpuq: error: --hosts 'a,,b': an empty entry"),
        (["--hosts", "h:99999"], 2, "tpuq: error: --hosts: bad port in 'h:99999'"),
        (["--hosts", hosts, "--key", str(tmp_path / "nokey")], 2, "no such readable file"),
        (["--hosts", hosts, "--key", str(stranger)], 255, "authentication failed as root"),
        (["--hosts", hosts, "--timeout", "soon"], 2, "cannot read duration 'soon'"),
    ]
    for args, code, says in cases:
        r = fake_pod.tpuq("pod", "run", *args, "--", "true")
        assert r.returncode == code, (args, r.stderr)
        assert says in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
