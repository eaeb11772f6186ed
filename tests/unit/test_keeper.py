"""An attempt's keeper, for real: a keeper server process forks keepers that start jobs,
fence them on their lease, stop them when asked, cap their output and outlive whoever
talks to them."""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.harness import wait_for
from tpuq.agent.keeper.link import KeeperGone, KeeperLink, KeeperServer, adopt, live_keepers
from tpuq.agent.keeper.messages import Collected, Ended, FromKeeper, Launch, Lease, Started, Status, Stop
from tpuq.agent.keeper.pool import POOL, SPARES
from tpuq.agent.keeper.process import clock, keeper_socket


class Server(KeeperServer):
    """Remembers the keepers it launched, so the test can stop every one it started."""

    def __init__(self, run_dir: str, lives: int | None = None) -> None:
        super().__init__(run_dir, lives)
        self.keepers: list[int] = []

    def launch(self, launch: Launch) -> tuple[KeeperLink, FromKeeper]:
        link, first = super().launch(launch)
        assert isinstance(first, (Started, Ended))
        assert first.keeper_pid is not None
        self.keepers.append(first.keeper_pid)
        return link, first


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    monkeypatch.setenv("TPUQ_HOME", str(tmp_path / "home"))  # a keeper left alone looks here
    srv = Server(str(tmp_path / "run"))
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        for pid in srv.keepers:  # keepers outlive their server: by pid, each we started
            try:
                if "tpuq.agent.keeper." in Path(f"/proc/{pid}/cmdline").read_text():
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass


def launch(tmp_path: Path, code: str, **kw: Any) -> Launch:
    log = tmp_path / "logs" / "1.log"
    base = Launch(job_id=1, attempt=1, host="h", argv=[sys.executable, "-c", code],
                  env={"PATH": os.environ["PATH"]}, cwd=str(tmp_path), log_path=str(log),
                  exit_path=str(log) + ".exit", run_dir=str(tmp_path / "run"),
                  lease_until=clock() + 60, lease_s=60, grace_s=5, log_max_bytes=10**6)
    return replace(base, **kw)


def until_ended(link: KeeperLink, timeout: float = 30.0) -> Ended:
    while True:
        msg = link.wait_event(timeout)
        if isinstance(msg, Ended):
            return msg


def test_a_job_runs_under_its_keeper_and_its_end_is_known_exactly(server, tmp_path):
    link, first = server.launch(launch(tmp_path, "print('hello'); raise SystemExit(3)"))
    assert isinstance(first, Started) and first.pid > 0
    ended = until_ended(link)
    assert (ended.code, ended.signal, ended.fenced) == (3, None, False)
    assert ended.signalled is False, "it ended by itself"
    assert (tmp_path / "logs" / "1.log").read_text() == "hello\n"
    # the report comes first; the exit file (for an agent that was not there to take
    # the report) is written before the keeper lets go of the attempt (its socket
    # goes), which it does once collected
    sock = Path(keeper_socket(str(tmp_path / "run"), 1, 1))
    assert sock.exists()
    link.send(Collected())
    wait_for(lambda: not sock.exists(), 30, "the keeper to let go of the attempt")
    written = json.loads((tmp_path / "logs" / "1.log.exit").read_text())
    assert written["code"] == 3 and written["job_id"] == 1


def test_an_unrenewed_lease_stops_the_job_before_it_can_run_out(server, tmp_path):
    code = ("import signal, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: print('saving', flush=True))\n"
            "time.sleep(60)\n")
    la = launch(tmp_path, code, lease_until=clock() + 3.0, lease_s=3.0)
    link, _ = server.launch(la)
    ended = until_ended(link)
    assert clock() < la.lease_until, "killed before the lease could expire unrenewed"
    assert ended.fenced and ended.signal == 9
    assert "saving" in (tmp_path / "logs" / "1.log").read_text(), "the stop signal came first"


def test_renewals_keep_the_job_running(server, tmp_path):
    la = launch(tmp_path, "import time; time.sleep(2.5)", lease_until=clock() + 1.5, lease_s=1.5)
    link, _ = server.launch(la)
    while True:
        link.send(Lease(until=clock() + 1.5))
        try:
            msg = link.wait_event(0.3)
        except KeeperGone:
            continue
        if isinstance(msg, Ended):
            break
    assert (msg.code, msg.fenced) == (0, False)


def test_a_stop_signals_the_group_then_kills_it_after_the_grace(server, tmp_path):
    code = ("import signal, subprocess, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: print('term', flush=True))\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n")
    link, _ = server.launch(launch(tmp_path, code))
    log = tmp_path / "logs" / "1.log"
    # the keeper opens the log once it has reported the start: it may not be there yet
    wait_for(lambda: log.exists() and "ready" in log.read_text(), 30, "the job to be ready")
    started = clock()
    link.send(Stop(signal="SIGTERM", grace=1.0))
    ended = until_ended(link)
    assert ended.signal == 9 and 1.0 <= clock() - started < 10
    assert "term" in log.read_text() and ended.signalled is True


def test_output_over_the_cap_is_dropped_said_so_and_its_tail_kept(server, tmp_path):
    code = ("import sys\n"
            "for i in range(3000):\n"
            "    sys.stdout.write(f'{i:06d}' + 'x' * 1000 + '\\n')\n"
            "print('the very end')\n")
    link, _ = server.launch(launch(tmp_path, code, log_max_bytes=100_000))
    ended = until_ended(link)
    text = (tmp_path / "logs" / "1.log").read_text()
    assert len(text) < 100_000 + 70 * 1024 + 1000, "at most the cap and the kept tail"
    assert "reached TPUQ_LOG_MAX_BYTES (100000 bytes)" in text
    assert f"{ended.dropped} bytes of output were dropped" in text
    assert text.rstrip().endswith("the very end") and text.startswith("000000x")


def test_a_keeper_outlives_its_agent_and_a_new_one_adopts_it(server, tmp_path):
    gate = tmp_path / "gate"
    code = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.02)\n"
    link, first = server.launch(launch(tmp_path, code))
    link.close()  # the agent dies
    server.stop()  # and the server that forked the keeper
    assert live_keepers(str(tmp_path / "run")) == [(1, 1)]
    adopted = adopt(str(tmp_path / "run"), 1, 1)
    assert adopted is not None
    link, status = adopted
    assert isinstance(status, Status) and isinstance(first, Started)
    assert status.pid == first.pid and not status.ended
    gate.touch()
    ended = until_ended(link)
    assert ended.code == 0
    keeper = os.pidfd_open(ended.keeper_pid)
    try:
        link.send(Collected())
        assert select.select([keeper], [], [], 30)[0], \
            "its pool's server is gone: the keeper exits once its end was collected"
    finally:
        os.close(keeper)


def test_a_keeper_goes_back_to_its_pool_once_its_end_is_collected(server, tmp_path):
    """Sequential attempts reuse the pool's keepers instead of a fork each, and a keeper
    that kept ten attempts (log, --output file, chip locks) holds what a fresh one does."""
    assert server.proc is not None
    base = wait_for(lambda: _idle_fds(server.proc.pid, SPARES), 30, "the first keepers")
    used = set()
    for n in range(1, 11):
        la = launch(tmp_path, f"print({n})", job_id=n, log_path=str(tmp_path / f"{n}.log"),
                    exit_path=str(tmp_path / f"{n}.log.exit"), output=str(tmp_path / f"{n}.out"),
                    chip_locks=[str(tmp_path / "locks" / "chip0.lock")])
        link, first = server.launch(la)
        assert isinstance(first, Started)
        ended = until_ended(link)
        assert ended.code == 0 and ended.keeper_pid is not None
        used.add(ended.keeper_pid)
        link.send(Collected())
        link.close()
        sock = Path(keeper_socket(str(tmp_path / "run"), n, 1))
        wait_for(lambda sock=sock: not sock.exists(), 30, f"keeper of {n} to let go of it")
        assert (tmp_path / f"{n}.out").read_text() == f"{n}\n"
    assert len(used) <= SPARES + 1, f"a keeper forked for each attempt: {sorted(used)}"
    wait_for(lambda: set(_idle_fds(server.proc.pid, len(used)).values()) ==
             set(base.values()), 30, "every idle keeper to hold what a fresh one does",
             on_timeout=lambda: f"fresh {base}, now {_idle_fds(server.proc.pid, 0)}")


def test_keepers_whose_lives_are_over_leave_their_place_to_new_ones(tmp_path, monkeypatch):
    """A keeper exits after its last attempt holding no place in the pool: launches go on
    however many keepers came and went (each place kept on the way out counted a keeper
    that was not there, and once POOL were, no launch found one)."""
    monkeypatch.setenv("TPUQ_HOME", str(tmp_path / "home"))
    srv = Server(str(tmp_path / "run"), lives=2)
    srv.start()
    try:
        for n in range(1, 4 * POOL + 1):
            la = launch(tmp_path, "", argv=["/bin/true"], job_id=n,
                        log_path=str(tmp_path / f"{n}.log"), exit_path=str(tmp_path / f"{n}.x"))
            link, first = srv.launch(la)
            assert isinstance(first, Started), f"launch {n}: {first}"
            assert until_ended(link).code == 0
            link.send(Collected())
            link.close()
        assert len(set(srv.keepers)) >= 2 * POOL, "each keeper kept two attempts at most"
    finally:
        srv.stop()


def test_keepers_killed_while_idle_are_replaced(server, tmp_path):
    """Idle keepers killed (a stray kill -9, the OOM killer) give their places back when
    their server reaps them, and it forks new ones: a launch still finds a keeper."""
    assert server.proc is not None
    for _ in range(POOL // SPARES + 1):  # more places than the pool has, if none came back
        idle = wait_for(lambda: _idle_fds(server.proc.pid, SPARES), 30, "idle keepers")
        for pid in idle:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda idle=idle: not any(_alive(p) for p in idle), 30, "them gone")
    link, first = server.launch(launch(tmp_path, "pass"))
    assert isinstance(first, Started)
    assert until_ended(link).code == 0
    link.send(Collected())


def test_the_pool_keeps_at_most_its_size_of_idle_keepers(server, tmp_path):
    """More attempts than the pool holds end at once: the keepers beyond it exit."""
    assert server.proc is not None
    gate = tmp_path / "gate"
    code = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.02)\n"
    links = [server.launch(launch(tmp_path, code, job_id=n, log_path=str(tmp_path / f"{n}.log"),
                                  exit_path=str(tmp_path / f"{n}.log.exit")))[0]
             for n in range(1, POOL + 3)]
    gate.touch()
    for link in links:
        assert until_ended(link).code == 0
        link.send(Collected())
    wait_for(lambda: len(_idle_fds(server.proc.pid, 0)) == POOL, 30,
             f"{POOL} keepers idle, the rest gone",
             on_timeout=lambda: f"{len(_idle_fds(server.proc.pid, 0))} alive")


def _idle_fds(server: int, at_least: int) -> dict[int, int]:
    """Each live keeper of `server` (with no job of its own running) and how many
    descriptors it holds; {} while fewer than `at_least` are there."""
    found = {}
    for pid in _children(server):
        if not _alive(pid) or _children(pid):
            continue
        try:
            found[pid] = len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
    return found if len(found) >= at_least else {}


def test_a_chip_locked_by_someone_else_is_a_host_error(server, tmp_path):
    lock = tmp_path / "locks" / "chip0.lock"
    lock.parent.mkdir()
    fd = os.open(lock, os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        link, first = server.launch(launch(tmp_path, "print('never')", chip_locks=[str(lock)]))
        assert isinstance(first, Ended) and first.host_error
        assert "chip0.lock is locked by another process" in (first.error or "")
    finally:
        os.close(fd)


def test_a_log_that_cannot_be_opened_ends_the_started_job_as_a_host_error(server, tmp_path):
    """The log is opened once the job started (its creation is beside the start, not
    before it): one that cannot be ends the job at once, and says why."""
    la = launch(tmp_path, "import time; time.sleep(60)")
    os.makedirs(la.log_path)  # a directory where the log goes: open() fails
    link, first = server.launch(la)
    assert isinstance(first, Started)
    ended = until_ended(link)
    assert ended.host_error and f"could not open its log {la.log_path}" in (ended.error or "")
    assert not _alive(first.pid), "killed, not left to sleep its minute"
    link.send(Collected())


def _children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (from /proc/<pid>/stat: field 4 is the ppid)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_keeper_server_and_its_idle_keepers_exit_when_their_agent_is_killed(tmp_path):
    """An agent killed with -9 leaves no keeper server or idle keeper behind (they served it
    alone); a keeper that holds a job is not one of them and is not affected."""
    import subprocess

    agent = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from tpuq.agent.keeper.link import KeeperServer\n"
         "s = KeeperServer(sys.argv[1]).start()\n"
         "print(s.proc.pid, flush=True)\n"
         "time.sleep(600)\n", str(tmp_path / "run")],
        stdout=subprocess.PIPE, text=True)
    server, spares = 0, []
    try:
        assert agent.stdout is not None
        server = int(agent.stdout.readline())
        spares = wait_for(lambda: len(_children(server)) >= 2 and _children(server), 30,
                          "the server to fork its spares")
        agent.kill()
        agent.wait(10)
        wait_for(lambda: not any(_alive(p) for p in (server, *spares)), 30,
                 "the server and its spares to exit")
    finally:
        for pid in (agent.pid, server, *spares):
            if not pid:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_keepers_rehearsal_leaves_nothing_behind(tmp_path, monkeypatch):
    """What a fresh keeper runs while it waits (the launch path on a sample) opens nothing it
    keeps and writes nothing: what a job inherits from its keeper stays as it was."""
    from tpuq.agent.keeper import pool

    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir("/proc/self/fd"))
    pool._rehearse()
    assert sorted(os.listdir("/proc/self/fd")) == before
    assert os.listdir(tmp_path) == []


def test_refused_launches_leave_the_pool_as_it_was(server, tmp_path):
    """A keeper gives its place in the pool back once its launch started or was
    refused, and takes one again to wait for the next: more refusals than the pool
    holds leave it able to launch, or a later launch would wait for no keeper."""
    import socket

    for _ in range(POOL + 1):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(server.path)
            s.sendall(b"not a launch\n")
            assert b"bad launch request" in s.recv(65536)
    link, first = server.launch(launch(tmp_path, "pass"))
    assert isinstance(first, Started)
    assert until_ended(link).code == 0
    link.send(Collected())
