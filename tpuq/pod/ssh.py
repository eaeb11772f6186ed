"""SSH to the workers with Fabric: options, connections, one command with its output.

Fabric gives the connections (ssh_config, keys, agent, SFTP). Commands run on a channel
of the connection's transport rather than through `Connection.run`: Invoke's runner
keeps all of a command's output in memory and joins it again for every chunk it reads,
which a training run's days of output cannot afford. Here output goes straight to the
caller's streams, decoded incrementally (a UTF-8 character split across two reads stays
whole).

Fabric and Paramiko are imported only inside the functions that connect, so the
package can be imported by the CLI without loading them.
"""

from __future__ import annotations

import codecs
import io
import os
import select
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from tpuq.errors import Failure, TpuqError
from tpuq.pod.hosts import Worker

T = TypeVar("T")
# gcloud's key for TPU VMs, which `gcloud compute tpus tpu-vm ssh` spreads to every worker;
# Paramiko's own search looks only for id_rsa, id_ecdsa and id_ed25519
GCLOUD_KEY = "~/.ssh/google_compute_engine"
CHUNK = 32768


class Writer(Protocol):
    def write(self, text: str, /) -> int: ...


class SshError(TpuqError):
    """A worker could not be reached or asked; the message names it, for people."""

    KIND = Failure.UNAVAILABLE


class KeyFileError(TpuqError, ValueError):
    """The SSH key file given does not exist or cannot be read."""


@dataclass(frozen=True)
class SshOptions:
    """How to reach the workers: an entry's own user and port win over these."""

    user: str | None = None
    key: str | None = None
    port: int | None = None
    connect_timeout_s: float = 10.0

    def key_files(self) -> list[str]:
        if self.key:
            path = os.path.expanduser(self.key)
            if not os.path.isfile(path) or not os.access(path, os.R_OK):
                raise KeyFileError(f"SSH key {self.key}: no such readable file")
            return [path]
        gcloud = os.path.expanduser(GCLOUD_KEY)
        return [gcloud] if os.path.isfile(gcloud) else []


def connect(worker: Worker, opts: SshOptions) -> Any:
    """An open fabric.Connection to the worker; SshError saying why not."""
    import fabric

    keys = opts.key_files()
    conn = fabric.Connection(
        worker.host, user=worker.user or opts.user, port=worker.port or opts.port,
        connect_timeout=opts.connect_timeout_s,
        connect_kwargs={"key_filename": keys} if keys else {})
    try:
        conn.open()
    except Exception as e:  # noqa: BLE001 - Paramiko and socket errors, said in one line
        conn.close()
        raise SshError(f"{worker.name} ({worker.address}): {describe(e, conn.user, keys)}") from None
    return conn


def describe(e: BaseException, user: str, keys: list[str]) -> str:
    """A connection failure in words."""
    import socket

    import paramiko

    if isinstance(e, paramiko.AuthenticationException):
        tried = f" with {', '.join(keys)}" if keys else ""
        return f"authentication failed as {user}{tried} (--user, --key)"
    if isinstance(e, paramiko.ssh_exception.NoValidConnectionsError):
        reasons = {err.strerror or str(err) for err in e.errors.values()}
        return f"cannot connect: {', '.join(sorted(reasons)).lower()}"
    if isinstance(e, paramiko.BadHostKeyException):
        return f"its host key is not the one known_hosts has ({e})"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "cannot connect: timed out"
    if isinstance(e, socket.gaierror):
        return f"cannot connect: unknown host ({e.strerror})"
    if isinstance(e, OSError):
        return f"cannot connect: {e.strerror or e}"
    return f"cannot connect: {e}"


def close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - a dead transport may fail to close; it is gone anyway
        pass


def stream(conn: Any, command: str, out: Writer, err: Writer,
           started: Callable[[], None] | None = None) -> int | None:
    """Run `command` on a new channel, output to `out` and `err` as it comes.

    Returns the exit status, or None when the channel closed without one (the connection
    was lost, or the remote process died of a signal and the shell with it).
    """
    chan = conn.create_session()
    try:
        chan.exec_command(command)
        chan.shutdown_write()  # no input: a command that reads stdin sees its end
        if started is not None:
            started()
        dec_out = codecs.getincrementaldecoder("utf-8")("replace")
        dec_err = codecs.getincrementaldecoder("utf-8")("replace")
        while True:
            if chan.recv_ready():
                out.write(dec_out.decode(chan.recv(CHUNK)))
            elif chan.recv_stderr_ready():
                err.write(dec_err.decode(chan.recv_stderr(CHUNK)))
            elif chan.eof_received or chan.closed:
                break
            else:
                select.select([chan], [], [], 0.2)
        while chan.recv_stderr_ready():  # stderr is not part of the EOF ordering
            err.write(dec_err.decode(chan.recv_stderr(CHUNK)))
        out.write(dec_out.decode(b"", final=True))
        err.write(dec_err.decode(b"", final=True))
        status = chan.recv_exit_status()
        return None if status == -1 else int(status)
    finally:
        chan.close()


def capture(conn: Any, command: str) -> tuple[int | None, str, str]:
    """(exit status, stdout, stderr) of a short command."""
    out, err = io.StringIO(), io.StringIO()
    status = stream(conn, command, out, err)
    return status, out.getvalue(), err.getvalue()


def failure(status: int | None, stderr: str) -> str:
    """A remote command that failed, in one line: its status and its last words."""
    tail = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()][-3:]
    how = "the connection closed" if status is None else f"exit {status}"
    return f"{how}: {' / '.join(tail) or 'no output'}"


def in_parallel(items: Sequence[T], fn: Callable[[T], Any]) -> list[Any]:
    """fn(item) for every item at once, one thread each; results in order (an exception
    raised by fn is returned in its place)."""
    results: list[Any] = [None] * len(items)

    def one(i: int, item: T) -> None:
        try:
            results[i] = fn(item)
        except Exception as e:  # noqa: BLE001 - handed back to the caller
            results[i] = e

    threads = [threading.Thread(target=one, args=(i, it), daemon=True, name=f"tpuq-pod-{i}")
               for i, it in enumerate(items)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
