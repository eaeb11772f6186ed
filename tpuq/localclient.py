"""The CLI's side of the local agent's Unix socket (both deployments).

Import-light on purpose: `tpuq submit` through the socket must not load SQLAlchemy,
which alone costs ~200 ms (and Celery, in the team deployment, as much again), so a
submit on a host with an agent finishes in tens of milliseconds.

Every request names the deployment (Settings.deployment); an agent serving another one
refuses with `Failure.OTHER_DEPLOYMENT`, which callers treat like no agent at all.
"""

from __future__ import annotations

import errno
import socket

from tpuq import framing, protocol
from tpuq.errors import TpuqError
from tpuq.protocol import Failure, Refusal, Reply, Request


class AgentUnavailable(TpuqError, OSError):
    """Nobody answers on the socket, or the agent there serves another deployment: the
    request was not carried out, so the caller may do it another way."""

    KIND = Failure.UNAVAILABLE


class AgentSkew(TpuqError, OSError):
    """The agent speaks another version of the socket's protocol: the message says
    whether the request was carried out, and what to upgrade."""

    KIND = Failure.UNAVAILABLE


class AgentNoAnswer(TpuqError, OSError):
    """The request reached an agent but no answer came back: it may have been carried
    out (a submit committed just before the agent died), so it must not be redone."""

    KIND = Failure.UNAVAILABLE


def call(path: str, request: Request, timeout: float | None = None,
         fds: list[int] | None = None) -> Reply:
    """One request, one reply (a Refusal says why it was not carried out). The reply may
    come as several frames (framing.py); a request too big to send is refused here.
    `timeout`: for each step (connect, each read); by default the request's PATIENCE_S.
    `fds` travel with the request's first bytes (SCM_RIGHTS): a session's terminal."""
    try:
        raw = protocol.check_size(request)
    except protocol.ProtocolError as e:
        return Refusal(kind=Failure.REFUSED, error=str(e))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(request.PATIENCE_S if timeout is None else timeout)
    try:
        try:
            s.connect(path)
        except OSError as e:  # missing, refused, not ours to open: nothing was sent
            if e.errno == errno.EAGAIN:  # there, but its backlog is full
                return Refusal(kind=Failure.BUSY, error="agent busy (no connection "
                               "accepted), try again")
            raise AgentUnavailable(str(e)) from None
        data = _exchange(s, path, raw, fds)
    finally:
        s.close()
    if not data:
        raise AgentNoAnswer(f"the agent at {path} closed the connection without answering")
    try:
        reply = framing.decode(framing.split(data))
    except protocol.SkewError as e:
        raise AgentSkew(f"{path}: {e}") from None
    except protocol.ProtocolError:
        raise AgentNoAnswer(f"the agent at {path} answered garbled") from None
    if isinstance(reply, Refusal) and reply.kind is Failure.OTHER_DEPLOYMENT:
        raise AgentUnavailable(reply.error or "the agent serves another deployment")
    return reply


def _exchange(s: socket.socket, path: str, raw: bytes, fds: list[int] | None = None) -> bytes:
    """Send the request, read the reply to its end. An agent that refused before reading
    all of it (busy) answered all the same: a send that fails still reads what came back,
    and a reset after an answer ends that answer (framing.decode checks it is whole)."""
    sent: OSError | None = None
    try:
        sent_first = socket.send_fds(s, [raw], fds) if fds else 0
        s.sendall(raw[sent_first:])
        s.shutdown(socket.SHUT_WR)
    except OSError as e:
        sent = e
    chunks: list[bytes] = []
    try:
        while chunk := s.recv(1 << 20):
            chunks.append(chunk)
    except ConnectionResetError as e:
        if not chunks:
            raise AgentNoAnswer(f"the agent at {path} did not answer ({sent or e})") from None
    except OSError as e:
        raise AgentNoAnswer(f"the agent at {path} did not answer ({sent or e})") from None
    if sent is not None and not chunks:
        raise AgentNoAnswer(f"the agent at {path} did not answer ({sent})")
    return b"".join(chunks)


def ping(path: str, timeout: float = 2.0) -> protocol.Pong | None:
    """The agent's answer to a ping (its pid, host and deployment), or None when no
    agent answers at `path`."""
    try:
        reply = call(path, protocol.Ping(), timeout=timeout)
    except OSError:
        return None
    return reply if isinstance(reply, protocol.Pong) else None


def wake(path: str, deployment: str | None) -> bool:
    """Ring the local agent, which rings every agent in the team deployment. False when
    no agent of this deployment runs here (agents poll the database anyway)."""
    try:
        return isinstance(call(path, protocol.Wake(deployment=deployment), timeout=5.0),
                          protocol.Done)
    except OSError:
        return False
