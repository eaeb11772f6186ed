"""Real services for tests: a private redis-server per test, a fresh PostgreSQL database.

Each test gets its own Redis process on a free port (so a test may stop and restart
it) and its own PostgreSQL database on the machine's server (dropped afterwards).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

from sqlalchemy import create_engine, text

PG_ADMIN = os.environ.get("TPUQ_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A real redis-server we own: start, stop (kill -9), start again on the same port."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (.ci/run installs it)")
        self.binary = binary

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:  # wait for the server to say it is ready
            if b"Ready to accept connections" in line:
                break
        else:
            raise RuntimeError("redis-server exited before it was ready")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()


def _admin(sql: str) -> None:
    """CREATE/DROP DATABASE cannot run in a transaction: autocommit on the admin db."""
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(text(sql))
    finally:
        admin.dispose()


def create_pg_database() -> str:
    name = f"tpuq_test_{uuid.uuid4().hex[:10]}"
    _admin(f'CREATE DATABASE "{name}"')
    return PG_ADMIN.rsplit("/", 1)[0] + "/" + name


def drop_pg_database(url: str) -> None:
    _admin(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
