"""A keeper's socket works however deep the agent's run directory is: a Unix socket's
address holds 108 bytes, and a deep TPUQ_HOME (or a job's hundredth attempt) passes it."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from tpuq.agent.keeper.process import SUN_PATH, keeper_socket, listen, unix_call


def test_a_keeper_socket_past_the_address_limit_binds_and_is_reached(tmp_path: Path):
    run_dir = tmp_path / ("d" * 60) / ("e" * 60)
    run_dir.mkdir(parents=True)
    path = keeper_socket(str(run_dir), 123456789, 1000)
    assert len(os.fsencode(path)) > SUN_PATH, "the case the keeper meets on a deep home"
    listener = listen(path)
    try:
        assert Path(path).is_socket() and (Path(path).stat().st_mode & 0o777) == 0o600
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with client:
            unix_call(client, path, "connect")
            conn, _ = listener.accept()
            with conn:
                client.sendall(b"hi")
                assert conn.recv(2) == b"hi"
    finally:
        listener.close()


def test_a_short_path_is_used_as_it_is(tmp_path: Path):
    path = keeper_socket(str(tmp_path), 1, 1)
    listener = listen(path)
    with listener:
        assert listener.getsockname() == path
