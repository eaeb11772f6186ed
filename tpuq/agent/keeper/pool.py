"""The keepers' pool: a small single-threaded server (`python -m tpuq.agent.keeper.pool`,
started by the agent) keeps keepers (keeper/process.py) waiting for launches, so a
launch waits for neither a fresh interpreter (tens of milliseconds) nor a fork.

- A keeper waits idle on the server's socket (`run_dir/keepers.sock`); idle keepers race
  to accept the next launch. The one that wins keeps that attempt: the job's process
  group, its log, its lease. Its session is its own, so it outlives the server.
- Once the attempt ended and an agent collected its end, the keeper goes back to the
  pool and waits for the next launch, while the pool has room (at most POOL idle) and
  its server still runs; otherwise it exits. A keeper is forked once per LIVES
  attempts at most, not once per attempt: the pages a forked process first writes to
  are copied (about 870 page faults a keeper, 50 of them a `/bin/true` job's), and a
  fresh keeper spent ten times the CPU of a pooled one (about 10 ms a job against 1,
  on 2 cores), on the cores the next launch needs.
- The server forks a keeper whenever fewer than SPARES are idle, and reaps the ones that
  exit. It is its agent's: it exits when the agent does (a kill -9 included), and the
  idle keepers with it; keepers holding an attempt live on for the next agent to adopt.

Who is idle is counted in a pipe, not in a message: the pipe holds one byte for each
free place in the pool. An idle keeper holds a place (a byte it read); it puts it back
when it takes a launch, and reads one again to go back, or exits when none is left. The
server reads a place for each keeper it forks, and counts the bytes left (FIONREAD).
Each keeper also says when it is idle and when taken (`i<pid>`, `x<pid>`), so a keeper
killed while idle (a stray kill -9, the OOM killer) has its place given back when the
server reaps it, and the server forks another.
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import selectors
import signal
import socket
import struct
import sys
import termios
from typing import NamedTuple

from tpuq.agent.keeper.messages import Launch, Refused, Started, decode_as, encode
from tpuq.agent.keeper.process import SERVER, Keeper, keeper_socket, listen, read_line, reply

log = logging.getLogger("tpuq.keeper")
SPARES = 2  # idle keepers the server keeps at least: a launch does not wait for a fork
POOL = 8  # idle keepers kept at most (a host's single-chip jobs each give one back)
LIVES = 256  # attempts a keeper keeps before it exits: whatever one left behind goes with it


class Pool(NamedTuple):
    """The descriptors the server and its keepers share."""

    listener: socket.socket  # the server's socket: launches arrive here
    places_r: int  # one byte for each free place in the pool (non-blocking)
    places_w: int
    taken_r: int  # a keeper writes a byte here when it took a launch: the server refills
    taken_w: int
    alive_r: int  # EOF here once the server is gone
    alive_w: int

    @classmethod
    def open(cls, listener: socket.socket) -> Pool:
        places_r, places_w = os.pipe()
        os.set_blocking(places_r, False)
        os.write(places_w, b"p" * POOL)
        return cls(listener, places_r, places_w, *os.pipe(), *os.pipe())

    def idle(self) -> int:
        """Keepers idle now (and forked to be), as the places taken say."""
        free: int = struct.unpack("i", fcntl.ioctl(self.places_r, termios.FIONREAD, b"\0" * 4))[0]
        return POOL - free

    def take_place(self) -> bool:
        try:
            return bool(os.read(self.places_r, 1))
        except BlockingIOError:
            return False  # the pool is full

    def taken(self) -> None:
        """A keeper took a launch: its place is free again, and the server is told."""
        for fd, say in ((self.places_w, b"p"), (self.taken_w, b"x%d\n" % os.getpid())):
            try:
                os.write(fd, say)
            except OSError:
                pass  # the server is gone: nobody counts any more

    def waiting(self) -> None:
        """This keeper holds a place and waits for a launch: the server is told (it gives
        the place back should the keeper die waiting)."""
        try:
            os.write(self.taken_w, b"i%d\n" % os.getpid())
        except OSError:
            pass

    def give_back(self) -> None:
        """The place of a keeper that died waiting (the server's)."""
        os.write(self.places_w, b"p")

    def server_gone(self) -> bool:
        return bool(select.select([self.alive_r], [], [], 0)[0])


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else os.getppid(),
          int(sys.argv[3]) if len(sys.argv) > 3 else LIVES)


def serve(run_dir: str, agent_pid: int, lives: int = LIVES) -> None:
    """Keep at least SPARES keepers idle on run_dir/keepers.sock until the agent exits;
    each keeps `lives` attempts at most."""
    try:
        agent = os.pidfd_open(agent_pid)
    except ProcessLookupError:
        return  # the agent is gone already
    if os.getppid() != agent_pid:
        return  # the pid was reused: the agent that started this server is gone
    listener = listen(os.path.join(run_dir, SERVER))
    listener.setblocking(False)
    pool = Pool.open(listener)
    os.set_blocking(pool.taken_r, False)  # the server's alone: it reads what is there
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    waiting: set[int] = set()  # keepers that said they wait, holding a place
    heard = b""
    while True:
        while pool.idle() < SPARES and pool.take_place():
            _fork_keeper(pool, agent, lives)
        ready, _, _ = select.select([pool.taken_r, agent], [], [], 1.0)
        if agent in ready:
            return  # the agent exited: nobody will ask for a launch here again
        gone = _reap()  # first: all a reaped keeper ever said is in the pipe by now
        heard = _hear(pool.taken_r, heard, waiting)
        for pid in gone:
            if pid in waiting:  # it died holding its place
                waiting.discard(pid)
                pool.give_back()


def _hear(fd: int, heard: bytes, waiting: set[int]) -> bytes:
    """What the keepers said since (`heard`: a line not yet whole), into `waiting`."""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            break
        if not chunk:
            break
        heard += chunk
    *lines, heard = heard.split(b"\n")
    for line in lines:
        (waiting.add if line[:1] == b"i" else waiting.discard)(int(line[1:] or 0))
    return heard


def _reap() -> list[int]:
    """The children that exited, reaped."""
    gone: list[int] = []
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return gone
        if pid == 0:
            return gone
        gone.append(pid)


def _fork_keeper(pool: Pool, agent: int, lives: int) -> None:
    """A keeper, holding the place the server read for it, for `lives` attempts."""
    if os.fork():
        return
    code = 0
    try:
        os.setsid()
        for fd in (pool.alive_w, pool.taken_r, agent):
            os.close(fd)
        _rehearse()
        for life in range(1, lives + 1):
            pool.waiting()
            conn = _wait_for_launch(pool)
            if conn is None or not _keep(conn, pool):
                break
            # a place is taken only to wait again: one kept on the way out would count
            # an idle keeper that is not there (and the server forks no more once POOL are)
            if life == lives or pool.server_gone() or not pool.take_place():
                break  # its lives are over, nobody launches more here, or the pool is full
    except BaseException:  # noqa: BLE001 - a keeper's end is its own
        log.exception("keeper failed")
        code = 1
    os._exit(code)


def _rehearse() -> None:
    """A keeper's launch path run once on a sample while it waits, not when a job does:
    after the fork, every page of the server's memory a process first writes to is
    copied (copy-on-write), and decoding its first launch alone then took ten times
    as long as the next one (about half a millisecond more on every job's start)."""
    sample = Launch(job_id=0, attempt=0, host="", argv=["true"], env=dict(os.environ),
                    cwd="/", log_path="", exit_path="", run_dir="", lease_until=0.0,
                    lease_s=1.0, grace_s=0.0, log_max_bytes=0, chip_locks=["a", "b"])
    decode_as(Launch, encode(sample))
    encode(Started(pid=0, keeper_pid=0, start_ticks=0))
    selectors.DefaultSelector().close()


def _wait_for_launch(pool: Pool) -> socket.socket | None:
    """The next launch request's connection (idle keepers race for it), or None once the
    server is gone."""
    while True:
        ready, _, _ = select.select([pool.listener.fileno(), pool.alive_r], [], [])
        if pool.alive_r in ready:
            return None
        try:
            conn, _ = pool.listener.accept()
        except (BlockingIOError, InterruptedError):
            continue  # another keeper took it
        conn.setblocking(True)
        return conn


def _keep(conn: socket.socket, pool: Pool) -> bool:
    """Keep the launch on `conn` until its attempt is over; whether this keeper may go
    back to the pool (its end was collected, or the launch was refused). The server is
    told once the job started or the launch was refused: a keeper it forks then does
    not share the host's cores with the launch."""
    try:
        keeper = _take(conn)
    finally:
        pool.taken()
    if keeper is None:
        return True
    path = keeper_socket(keeper.launch.run_dir, keeper.launch.job_id, keeper.launch.attempt)
    listener = listen(path)  # after the job: the socket a later agent finds it by
    try:
        keeper.run(listener)
    finally:
        listener.close()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    keeper.close()
    return keeper.collected


def _take(conn: socket.socket) -> Keeper | None:
    """The launch read from `conn` and its job started; None when refused."""
    fds: list[int] = []
    try:
        conn.settimeout(10.0)
        launch = decode_as(Launch, read_line(conn, fds=fds))
        if launch.tty != bool(fds):
            raise ValueError("a session's launch comes with its terminal, only a session's")
    except (OSError, ValueError, TypeError) as e:
        for fd in fds:
            os.close(fd)
        reply(conn, Refused(f"bad launch request: {e}"))
        conn.close()
        return None
    keeper = Keeper(launch, conn, tty=fds[0] if fds else -1)
    keeper.start()
    return keeper


if __name__ == "__main__":
    main()
