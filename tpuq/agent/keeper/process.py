"""An attempt's keeper: the small process that owns one job's process group, outlives the
agent, and never lets the job outrun its lease (as slurmstepd, conmon and containerd's
shim do for theirs).

Why: the agent may crash, be upgraded, freeze or lose the database. The job must then
neither die with it (its work is not the agent's to lose) nor run on past the lease the
database gave it (another host may be given the job once the lease is gone). So the
job's parent is not the agent but its keeper, which
  - spawns the job (a fresh exec, its own session) and reaps it: its exit is known
    exactly, even when no agent is around, and is written to `<log>.exit`;
  - copies the job's output into the attempt's log, at most TPUQ_LOG_MAX_BYTES of it
    (then it drops the rest, says how much, and keeps the last 64 KiB for the end);
  - fences the job itself: each lease renewal the agent makes is passed on as "valid
    until" (CLOCK_BOOTTIME, taken before the renewal was sent); unrenewed, the job gets
    its stop signal and then SIGKILL before that time comes;
  - stops the job when asked (signal, grace, SIGKILL) and kills it at once when told;
  - answers on its own socket, so a restarted agent re-adopts it; an attempt that ended
    with no agent to tell is recorded by the keeper itself.

Keepers wait for launches in a pool (keeper/pool.py): an idle keeper takes the next
launch and keeps that attempt in a session of its own (its pool's server's end is not
its end); once an agent collected the end, it waits for the next launch. Nothing here
imports SQLAlchemy until a keeper must record an outcome itself.

An interactive session (`tpuq run`) comes with its caller's terminal (the slave end of
a pseudo-terminal, passed with the launch as SCM_RIGHTS): the job runs on it as its
controlling terminal (its own session, TIOCSCTTY), so the terminal's line discipline
turns the caller's Ctrl-C into SIGINT for the job's foreground processes. Its output
then goes to the caller, not to the log; what tpuq says to the person (a time limit
coming, a stop) the keeper writes into that terminal.

Messages are JSON lines, each a typed value of keeper/messages.py (versioned: a keeper
outlives its agent, so agents of another release read them).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import select
import selectors
import signal
import socket
import subprocess
import termios
import time
from collections import deque
from typing import Any

from tpuq import outputs
from tpuq.agent.keeper.messages import (
    Collected,
    Ended,
    Kill,
    Launch,
    Lease,
    Message,
    MessageError,
    Say,
    Started,
    Status,
    Stop,
    ToKeeper,
    UnknownVersion,
    as_dict,
    encode,
    to_keeper,
)
from tpuq.agent.tpu.chiplocks import ChipBusy, ChipLocks
from tpuq.agent.tpu.holders import exiting, proc_start_ticks

log = logging.getLogger("tpuq.keeper")
TAIL_KEPT = 64 * 1024  # what the end of a capped log shows
DRAIN_S = 2.0  # output still in the pipe once the group is dead: read it this long at most
SERVER = "keepers.sock"


def clock() -> float:
    """The clock leases are measured on: CLOCK_BOOTTIME goes on while the host sleeps
    (a suspended VM's lease runs out all the same)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def keeper_socket(run_dir: str, job_id: int, attempt: int) -> str:
    return os.path.join(run_dir, f"keeper-{job_id}-{attempt}.sock")


SUN_PATH = 108  # bytes of a Unix socket's address, its ending NUL included (Linux's unix(7))


def unix_call(sock: socket.socket, path: str, call: str) -> None:
    """`sock.bind(path)` or `sock.connect(path)` (`call`) for a path of any length: one
    longer than an address holds goes through its directory's descriptor
    (`/proc/self/fd/N/name`, which the kernel resolves), so a deep TPUQ_HOME, or a job's
    hundredth attempt, still gets its keeper."""
    if len(os.fsencode(path)) < SUN_PATH:
        getattr(sock, call)(path)
        return
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        getattr(sock, call)(f"/proc/self/fd/{fd}/{os.path.basename(path)}")
    finally:
        os.close(fd)


# an ended attempt's agent collects it at once; one that has not within this long is away
COLLECT_WAIT_S = 1.0


# ---- the keeper ---------------------------------------------------------------------------------
class Keeper:
    def __init__(self, launch: Launch, agent: socket.socket | None, tty: int = -1) -> None:
        self.launch = launch
        self.tty = tty  # a session's terminal (the job's stdin, stdout and stderr)
        self.say_fd = -1  # the same terminal opened apart, non-blocking: what tpuq says
        self.sel = selectors.DefaultSelector()
        self.conns: dict[socket.socket, bytes] = {}  # connected agents and their input
        if agent is not None:
            self._add_conn(agent)
        self.proc: subprocess.Popen[bytes] | None = None
        self.pidfd = -1
        self.out = -1  # the job's output pipe
        self.copy = -1  # the --output file, or -1
        self.log = None  # type: Any
        self.log_error: str | None = None  # the log could not be opened: the job's end says so
        self.written = 0
        self.dropped = 0
        self.tail: deque[bytes] = deque()
        self.tail_bytes = 0
        self.kill_at: float | None = None  # after a stop signal: the end of the grace
        self.fenced = False
        self.stop_sent = False
        self.signalled = False  # a signal of ours reached the job before it ended
        self.ended: Ended | None = None
        self.ended_clock = 0.0
        self.collected = False
        self.locks = ChipLocks(launch.chip_locks)

    # -- start ------------------------------------------------------------------------------
    def start(self) -> None:
        la = self.launch
        try:
            self.locks.acquire()
        except ChipBusy as e:
            self._end(Ended(error=str(e), host_error=True))
            return
        kw: dict[str, Any] = {}
        if la.user is not None:
            kw = {"user": la.user, "group": la.group, "extra_groups": la.groups}
        if self.tty >= 0:
            kw.update(stdin=self.tty, stdout=self.tty, stderr=self.tty,
                      preexec_fn=_take_terminal)
            r = w = -1
        else:
            r, w = os.pipe()
            kw.update(stdin=subprocess.DEVNULL, stdout=w, stderr=subprocess.STDOUT)
        try:
            self.proc = subprocess.Popen(
                la.argv, cwd=la.cwd, env=la.env, start_new_session=True, close_fds=True,
                restore_signals=True, umask=la.umask, **kw)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            for fd in (r, w):
                if fd >= 0:
                    os.close(fd)
            self._end(Ended(error=f"could not start: {e}"))
            return
        self.pidfd = os.pidfd_open(self.proc.pid)
        self.sel.register(self.pidfd, selectors.EVENT_READ, "exit")
        if r >= 0:
            os.close(w)
            self.out = r
            os.set_blocking(r, False)
            self.sel.register(r, selectors.EVENT_READ, "output")
        else:
            self.say_fd = _open_apart(self.tty)
        self._send_all(Started(pid=self.proc.pid, keeper_pid=os.getpid(),
                               start_ticks=proc_start_ticks(self.proc.pid)))
        self._open_log()

    def _open_log(self) -> None:
        """The attempt's log (and its --output file), opened once the job started and
        was reported: creating a file is then beside the job's start, not before it (the
        job's output waits in its pipe meanwhile). A log that cannot be opened ends the
        job at once, a host's error (a full disk is not the job's)."""
        la = self.launch
        try:
            os.makedirs(os.path.dirname(la.log_path), exist_ok=True)
            self.log = open(la.log_path, "ab")  # noqa: SIM115 - the keeper's for its whole life
        except OSError as e:
            self.log_error = f"could not open its log {la.log_path}: {e.strerror or e}"
            assert self.proc is not None
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its end then reports the error
            except (ProcessLookupError, PermissionError):
                pass
            return
        self.written = self.log.tell()
        if self.tty >= 0:
            self.log.write(b"[tpuq: an interactive session: its output went to its "
                           b"caller's terminal]\n")
            self.log.flush()
        self.copy = self._open_output()

    # -- the loop -----------------------------------------------------------------------------
    def run(self, listener: socket.socket) -> None:
        """Keep the attempt until it ended and was collected (start() came first)."""
        self.sel.register(listener, selectors.EVENT_READ, "listen")
        while not self._done():
            timeout = self._next_deadline() - clock()
            for key, _ in self.sel.select(max(0.0, min(timeout, 60.0))):
                handler = key.data
                if handler == "exit":
                    self._job_exited()
                elif handler == "output":
                    if self.out >= 0:  # the exit, handled just before, drained it already
                        self._copy_output()
                elif handler == "listen":
                    conn, _ = listener.accept()
                    self._add_conn(conn)
                    self._send(conn, self._status())
                else:
                    self._read(key.fileobj)  # type: ignore[arg-type]
            self._timers()
        self._finish_unattended()

    def close(self) -> None:
        """What the attempt still holds once it is over: the agents' connections and the
        selector (the job's descriptors, its log and its chips went with its end), so a
        keeper that goes back to its pool (keeper/pool.py) keeps nothing of it."""
        for conn in list(self.conns):
            self._drop_conn(conn)
        self.sel.close()

    def _done(self) -> bool:
        if self.ended is None:
            return False
        if self.collected:
            return True
        # nobody to tell, or nobody who collected at once (a frozen agent, one cut off from
        # the database): record it ourselves now, well before the lease can run out and
        # the job be requeued as lost. Should the agent record it too, the second write
        # is fenced out (the attempt has ended): the end is recorded once either way.
        return not self.conns or clock() >= self._collect_by()

    def _collect_by(self) -> float:
        return min(self.ended_clock + COLLECT_WAIT_S, self.launch.lease_until)

    def _next_deadline(self) -> float:
        la = self.launch
        times = [la.lease_until - la.kill_margin_s - la.stop_lead_s, la.lease_until - la.kill_margin_s]
        if self.kill_at is not None:
            times.append(self.kill_at)
        if self.ended is not None:
            times.append(self._collect_by())
        return min(times)

    def _timers(self) -> None:
        if self.proc is None or self.ended is not None:
            return
        now, la = clock(), self.launch
        fence_kill = la.lease_until - la.kill_margin_s
        if now >= fence_kill - la.stop_lead_s and not self.stop_sent:
            self.fenced = True
            self.say("tpuq: this host's agent is unreachable and the session's lease runs "
                     "out: it stops now")
            self._signal(signal.SIGTERM)
            self.stop_sent = True
        if now >= fence_kill or (self.kill_at is not None and now >= self.kill_at):
            if now >= fence_kill:
                self.fenced = True
            self._signal(signal.SIGKILL)
            self.kill_at = None

    # -- messages -------------------------------------------------------------------------------
    def _add_conn(self, conn: socket.socket) -> None:
        conn.setblocking(False)
        self.conns[conn] = b""
        self.sel.register(conn, selectors.EVENT_READ, "conn")

    def _drop_conn(self, conn: socket.socket) -> None:
        self.conns.pop(conn, None)
        try:
            self.sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()

    def _read(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop_conn(conn)  # the agent went away; the job goes on
            return
        buf = self.conns.get(conn, b"") + data
        *lines, rest = buf.split(b"\n")
        self.conns[conn] = rest[-65536:]
        for line in lines:
            try:
                msg = to_keeper(line)
            except UnknownVersion as e:
                log.warning("job %s attempt %s: a message skipped: %s", self.launch.job_id,
                            self.launch.attempt, e)
                continue
            except MessageError:
                continue
            if not isinstance(msg, Launch):
                self._on(msg)

    def _on(self, msg: ToKeeper) -> None:
        if isinstance(msg, Lease) and not self.fenced:
            self.launch.lease_until = max(self.launch.lease_until, float(msg.until))
        elif isinstance(msg, Stop) and self.ended is None and not self.stop_sent:
            try:
                sig = signal.Signals[msg.signal]
            except KeyError:
                sig = signal.SIGTERM
            self._signal(sig)
            self.stop_sent = True
            grace = self.launch.grace_s if msg.grace is None else msg.grace
            self.kill_at = clock() + max(0.0, float(grace))
        elif isinstance(msg, Kill):
            self._signal(signal.SIGKILL)
        elif isinstance(msg, Collected):
            self.collected = True
        elif isinstance(msg, Say):
            self.say(msg.text)

    def say(self, text: str) -> None:
        """A line from tpuq in a session's terminal, on a line of its own; dropped when
        the terminal cannot take it at once (its reader stopped reading)."""
        if self.say_fd < 0 or self.ended is not None:
            return
        try:
            os.write(self.say_fd, f"\r\n[{text[:500]}]\r\n".encode(errors="replace"))
        except OSError:
            pass

    def _status(self) -> Status:
        la = self.launch
        return Status(job_id=la.job_id, attempt=la.attempt, keeper_pid=os.getpid(),
                      pid=self.proc.pid if self.proc else None,
                      start_ticks=proc_start_ticks(self.proc.pid) if self.proc else None,
                      ended=self.ended)

    def _send(self, conn: socket.socket, msg: Message) -> None:
        try:
            conn.setblocking(True)
            conn.settimeout(5.0)
            conn.sendall(encode(msg), socket.MSG_NOSIGNAL)
            conn.setblocking(False)
        except OSError:
            self._drop_conn(conn)

    def _send_all(self, msg: Message) -> None:
        for conn in list(self.conns):
            self._send(conn, msg)

    # -- the job --------------------------------------------------------------------------------
    def _signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.ended is None:
            if select.select([self.pidfd], [], [], 0)[0] or exiting(self.proc.pid):
                # it has exited already (a zombie not yet reaped), or is inside its exit
                # (its status set; releasing its memory before it is a zombie can take
                # milliseconds): its work ended without us, whatever its status says;
                # the exit is collected by _job_exited
                return
            try:
                os.killpg(self.proc.pid, sig)
                self.signalled = True
            except (ProcessLookupError, PermissionError):
                pass
            self._signal_session(sig)

    def _signal_session(self, sig: signal.Signals) -> None:
        """A session's shell puts each of its jobs in a process group of its own: they
        are reached through the session (the leader's pid is its id)."""
        if self.tty < 0 or self.proc is None:
            return
        for pid in session_members(self.proc.pid):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _copy_output(self, until: float | None = None) -> bool:
        """Copy what the job wrote; False at end of output."""
        while True:
            try:
                chunk = os.read(self.out, 65536)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            self._write(chunk)
            if until is not None and clock() > until:
                return True

    def _open_output(self) -> int:
        """The --output file, opened as the job's owner (outputs.py): emptied by the
        first attempt, appended to by later ones; -1 (and a line in the log) when it
        cannot be."""
        la = self.launch
        if not la.output:
            return -1
        try:
            return outputs.open_as(la.output, la.user, la.group, la.groups,
                                   truncate=la.attempt == 1)
        except OSError as e:
            why = str(e) if isinstance(e, outputs.Refused) else (e.strerror or str(e))
            self.log.write(f"[tpuq: --output {la.output}: not written: {why}]\n".encode())
            self.log.flush()
            return -1

    def _copy_to_output(self, chunk: bytes) -> None:
        try:
            while chunk:
                chunk = chunk[os.write(self.copy, chunk):]
        except OSError as e:
            self.log.write(f"\n[tpuq: --output {self.launch.output}: stopped writing: "
                           f"{e.strerror}]\n".encode())
            os.close(self.copy)
            self.copy = -1

    def _write(self, chunk: bytes) -> None:
        if self.log is None:
            return  # no log: the job is being killed (_open_log)
        if self.copy >= 0:
            self._copy_to_output(chunk)
        room = self.launch.log_max_bytes - self.written
        if room > 0:
            part = chunk[:room]
            self.log.write(part)
            self.log.flush()
            self.written += len(part)
            if len(part) == len(chunk):
                return
            chunk = chunk[len(part):]
            self.log.write(f"\n[tpuq: this attempt's output reached TPUQ_LOG_MAX_BYTES "
                           f"({self.launch.log_max_bytes} bytes); the rest is dropped until "
                           f"it ends, then its last {TAIL_KEPT // 1024} KiB follow]\n".encode())
            self.log.flush()
        self.dropped += len(chunk)
        self.tail.append(chunk)
        self.tail_bytes += len(chunk)
        while self.tail and self.tail_bytes - len(self.tail[0]) >= TAIL_KEPT:
            self.tail_bytes -= len(self.tail.popleft())

    def _job_exited(self) -> None:
        assert self.proc is not None
        # the leader is a zombie until reaped, so its pid (the group id) cannot be reused:
        # kill what is left of the group first, then reap
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._signal_session(signal.SIGKILL)
        rc = self.proc.wait()
        self.sel.unregister(self.pidfd)
        os.close(self.pidfd)
        if self.out >= 0:
            deadline = clock() + DRAIN_S
            while self._copy_output(until=deadline) and clock() < deadline:
                time.sleep(0.01)
            self.sel.unregister(self.out)
            os.close(self.out)
            self.out = -1
        self._end(Ended(code=rc if rc >= 0 else None, signal=-rc if rc < 0 else None))

    def _end(self, status: Ended) -> None:
        """`status`: how the job ended (or why it never ran); the keeper adds what it knows."""
        if self.log_error is not None:
            status = Ended(error=self.log_error, host_error=True)
        if self.dropped:
            kept = b"".join(self.tail)[-TAIL_KEPT:]
            self.log.write(f"\n[tpuq: {self.dropped} bytes of output were dropped; the last "
                           f"{len(kept)} follow]\n".encode() + kept)
        if self.log is not None:
            self.log.close()
        if self.copy >= 0:
            os.close(self.copy)
            self.copy = -1
        for fd in (self.tty, self.say_fd):  # the caller's terminal sees the end (EIO)
            if fd >= 0:
                os.close(fd)
        self.tty = self.say_fd = -1
        self.ended_clock = clock()
        self.ended = dataclasses.replace(
            status, fenced=self.fenced, signalled=self.signalled, dropped=self.dropped,
            keeper_pid=os.getpid(), ended_wall=time.time(), instance=self.launch.instance,
            job_id=self.launch.job_id, attempt=self.launch.attempt)
        self.locks.release()
        self._send_all(self.ended)
        # the exit file after the report: it is for an agent that was not there to
        # take the report (a restarted one reads it), and this keeper lives on until an
        # agent collected the end, so it is written before anyone can miss it
        _write_json(self.launch.exit_path, as_dict(self.ended))

    def _finish_unattended(self) -> None:
        """The attempt ended and no agent collected it: record the end ourselves, so a job
        that finished while its agent was away is not run again."""
        if self.collected or self.ended is None:
            return
        try:
            from tpuq.agent.attempts.outcome import record_unattended

            la = self.launch
            record_unattended(la.job_id, la.attempt, la.host, la.log_path, self.ended)
        except Exception:  # noqa: BLE001 - the exit file stays for a restarted agent
            log.exception("job %s attempt %s: recording the end failed",
                          self.launch.job_id, self.launch.attempt)


def listen(path: str) -> socket.socket:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_call(s, path, "bind")
    os.chmod(path, 0o600)  # the agent's alone
    s.listen(8)
    return s


def read_line(conn: socket.socket, limit: int = 8 * 1024 * 1024,
               fds: list[int] | None = None) -> bytes:
    """The first line; descriptors that came with it (at most one) added to `fds`."""
    buf = b""
    while b"\n" not in buf:
        chunk, got, _, _ = socket.recv_fds(conn, 65536, 1)
        for fd in got:
            if fds is not None and not fds:
                fds.append(fd)
            else:
                os.close(fd)
        if not chunk:
            break
        buf += chunk
        if len(buf) > limit:
            raise ValueError("request too large")
    return buf.split(b"\n", 1)[0]


def session_members(sid: int) -> list[int]:
    """Processes of session `sid` (from /proc/<pid>/stat), but the leader itself."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == sid:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2:].split()
        except (OSError, ValueError):
            continue
        if len(fields) > 3 and fields[3] == str(sid).encode():
            found.append(int(name))
    return found


def _take_terminal() -> None:
    """In the session's process, before exec (after setsid): its stdin, the caller's
    terminal, becomes its controlling terminal, with this process group in the
    foreground."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _open_apart(tty: int) -> int:
    """The terminal opened again, non-blocking (O_NONBLOCK on `tty` itself would reach
    the job's own stdin and stdout, which share its open file); -1 when it cannot be."""
    try:
        return os.open(os.ttyname(tty), os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return -1


def reply(conn: socket.socket, msg: Message) -> None:
    try:
        conn.sendall(encode(msg), socket.MSG_NOSIGNAL)
    except OSError:
        pass


def _write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)

