"""Sessions' terminals on their way to their start (agent/local/terminals.py): one per session,
a few per person, each kept or closed, never leaked."""

from __future__ import annotations

import os
import threading

import pytest

from tpuq.agent.local.terminals import MAX_PER_UID, Refused, Terminals, check_terminal


def fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def test_a_terminal_waits_for_its_session_and_is_taken_once() -> None:
    t = Terminals()
    master, slave = os.openpty()
    try:
        got: list[int | None] = []
        taker = threading.Thread(target=lambda: got.append(t.take(7, 10.0)))
        taker.start()
        t.offer(7, slave, uid=1000)
        taker.join(10.0)
        assert got == [slave]
        assert t.take(7, 0.0) is None, "taken once"
    finally:
        os.close(master)
        os.close(slave)


def test_a_second_terminal_and_one_too_many_are_refused_and_closed() -> None:
    t = Terminals()
    fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(MAX_PER_UID + 2)]
    t.offer(1, fds[0], uid=1000)
    with pytest.raises(Refused, match="has its terminal already"):
        t.offer(1, fds[1], uid=1000)
    assert not fd_open(fds[1])
    for i in range(2, MAX_PER_UID + 1):
        t.offer(i, fds[i], uid=1000)
    with pytest.raises(Refused, match="sessions of yours"):
        t.offer(99, fds[MAX_PER_UID + 1], uid=1000)
    assert not fd_open(fds[MAX_PER_UID + 1])
    t.drop(1)
    assert not fd_open(fds[0]) and 1 not in t.waiting()
    for job in t.waiting():
        t.drop(job)


def test_only_a_terminal_is_taken() -> None:
    with open(os.devnull, "rb") as f, pytest.raises(Refused, match="not a terminal"):
        check_terminal(f.fileno())
    master, slave = os.openpty()
    try:
        check_terminal(slave)
    finally:
        os.close(master)
        os.close(slave)
