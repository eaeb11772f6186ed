"""Ctrl-C while a request is carried out in the CLI's own process (no agent: its
transaction, SQLAlchemy's bookkeeping) is raised once the request is done, not halfway
through it, where SQLAlchemy warned of a transaction left behind on the user's terminal;
a second Ctrl-C is raised at once, for a database that does not answer."""

from __future__ import annotations

import os
import signal

import pytest

from tpuq.client import _ctrl_c_between


def test_a_ctrl_c_waits_for_the_request_to_be_done() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt):
        with _ctrl_c_between():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("the request")  # signals reach Python between bytecodes: by now
    assert done == ["the request"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_stops_it_at_once() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt):
        with _ctrl_c_between():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            done.append("the rest of the request")
    assert done == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_request_without_ctrl_c_ends_as_it_would() -> None:
    with _ctrl_c_between():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
