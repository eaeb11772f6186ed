"""The CLI's side of the local agent's Unix socket (both deployments).

Import-light on purpose: `tpuq submit` through the socket must not load SQLAlchemy,
which alone costs ~200 ms (and Celery, in the team deployment, as much again), so a
submit on a host with an agent finishes in tens of milliseconds.

Every request names the deployment (Settings.deployment); an agent serving another one
refuses with `Failure.OTHER_DEPLOYMENT`, which callers treat like no agent at all.
"""

from __future__ import annotations

import socket

from tpuq import protocol
from tpuq.errors import TpuqError
from tpuq.protocol import Failure, Refusal, Reply, Request


class AgentUnavailable(TpuqError, OSError):
    """Nobody answers on the socket, or the agent there serves another deployment: the
    request was not carried out, so the caller may do it another way."""

    KIND = Failure.UNAVAILABLE


class AgentNoAnswer(TpuqError, OSError):
    """The request reached an agent but no answer came back: it may have been carried
    out (a submit committed just before the agent died), so it must not be redone."""

    KIND = Failure.UNAVAILABLE


def call(path: str, request: Request, timeout: float = 30.0) -> Reply:
    """One request, one reply (a Refusal says why it was not carried out)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(path)
        except OSError as e:  # missing, refused, not ours to open: nothing was sent
            raise AgentUnavailable(str(e)) from None
        try:
            s.sendall(protocol.encode(request))
            s.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except OSError as e:
            raise AgentNoAnswer(f"the agent at {path} did not answer ({e})") from None
    finally:
        s.close()
    if not chunks:
        raise AgentNoAnswer(f"the agent at {path} closed the connection without answering")
    try:
        reply = protocol.decode_reply(b"".join(chunks))
    except protocol.ProtocolError:
        raise AgentNoAnswer(f"the agent at {path} answered garbled") from None
    if isinstance(reply, Refusal) and reply.kind is Failure.OTHER_DEPLOYMENT:
        raise AgentUnavailable(reply.error or "the agent serves another deployment")
    return reply


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
