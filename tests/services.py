"""Real services for tests: a private redis-server per test, a fresh PostgreSQL database.

Each test gets its own Redis process on a free port (so a test may stop and restart
it) and its own PostgreSQL database on the machine's server (dropped afterwards). A test
that must stop or restart PostgreSQL itself gets a private cluster (`PostgresServer`).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
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

    def __init__(self, workdir: Path, password: str = "") -> None:
        self.port = free_port()
        self.workdir = workdir
        self.password = password  # the default user's (requirepass), as a deployment sets
        self.proc: subprocess.Popen[bytes] | None = None
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (.ci/run installs it)")
        self.binary = binary

    @property
    def url(self) -> str:
        """The default user's URL: the agents' and admins' account."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir),
             *(["--requirepass", self.password] if self.password else [])],
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


def _pg_bindir() -> Path:
    """Where PostgreSQL's server programs are: on PATH, else Debian's versioned dirs."""
    found = shutil.which("pg_ctl")
    if found:
        bindir = Path(os.path.realpath(found)).parent
        if (bindir / "initdb").exists():
            return bindir

    def version(pg_ctl: str) -> tuple[int, ...]:  # /usr/lib/postgresql/<version>/bin/pg_ctl
        return tuple(int(x) for x in Path(pg_ctl).parts[-3].split(".") if x.isdigit())

    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=version)
    if not candidates:
        raise RuntimeError("PostgreSQL server programs (pg_ctl, initdb) not found "
                           "(.ci/run installs PostgreSQL)")
    return Path(candidates[-1]).parent  # the newest major version


class PostgresServer:
    """A private PostgreSQL cluster we own: initdb into a temp dir, start, restart, stop.

    It listens on a free loopback port (trust auth, superuser `postgres`) with its unix
    socket in its own directory, so a test can really stop and restart the server
    without touching the machine's. initdb refuses to run as root: as root, the programs
    run as the `postgres` user, who owns the cluster's directory. Built for speed, not
    durability (fsync off, small shared buffers).
    """

    def __init__(self) -> None:
        self.bindir = _pg_bindir()
        self.port = free_port()
        self.as_user: list[str] = []
        owner: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root needs a `postgres` user to run "
                                   "initdb and the server as") from None
            if shutil.which("runuser"):
                self.as_user = ["runuser", "-u", owner.pw_name, "--"]
            else:
                self.as_user = ["setpriv", f"--reuid={owner.pw_uid}", f"--regid={owner.pw_gid}",
                                "--init-groups", "--"]
        # not under pytest's tmp_path: as root that is private to root, and a unix socket
        # path must stay short (107 bytes)
        self.root = Path(tempfile.mkdtemp(prefix="tpuq-pg-"))
        if owner is not None:
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._initialised = False

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str, timeout: float = 120) -> str:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "LANG": "C",
               "HOME": str(self.root)}
        r = subprocess.run([*self.as_user, str(self.bindir / program), *args], cwd=self.root,
                           env=env, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} exited {r.returncode}:\n"
                               f"{r.stdout}{r.stderr}\n{self.log_tail()}")
        return r.stdout

    def init(self) -> PostgresServer:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "-E", "UTF8", "--locale=C", "--no-sync")
        with open(self.data / "postgresql.conf", "a") as f:
            f.write("\n# tpuq tests: a private, disposable, fast server\n"
                    f"port = {self.port}\n"
                    "listen_addresses = '127.0.0.1'\n"
                    f"unix_socket_directories = '{self.root}'\n"
                    "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
                    "shared_buffers = 16MB\nmax_connections = 100\n")
        self._initialised = True
        return self

    def start(self) -> PostgresServer:
        """Start (initdb first if needed) and wait until it accepts connections."""
        if not self._initialised:
            self.init()
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")
        return self

    def restart(self) -> None:
        """A real restart: fast shutdown (clients disconnected), then a new postmaster."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                  "-m", "fast", "restart")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server if it runs; by its postmaster pid if pg_ctl cannot."""
        if self.pid is None:
            return
        try:
            self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "30", "-m", mode, "stop")
        except (RuntimeError, subprocess.TimeoutExpired):
            pid = self.pid
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)  # its backends exit when the postmaster dies
                except ProcessLookupError:
                    pass

    @property
    def pid(self) -> int | None:
        """The running postmaster's pid (from postmaster.pid), or None when stopped."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (FileNotFoundError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, and someone else's: a server we did not start on our data dir
        return pid

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except FileNotFoundError:
            return ""

    def remove(self) -> None:
        """Stop the server and delete the cluster."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class TcpProxy:
    """A TCP relay on a port of its own to `target`, which a test can cut and restore:
    a network partition between one agent and its database, with both still running.

    `cut()` is a black hole, as a partition is: bytes sent either way are dropped, new
    connections are accepted and never answered, nobody is told. `restore()` resets
    whatever was connected across the cut (as the far end does once the link is back,
    having given up on it) and relays new connections again. The port never changes,
    so the client's URL does not either.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        import threading

        self.target = (target_host, target_port)
        self.port = free_port()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._open = threading.Event()  # relaying; cleared = black hole
        self._stopped = False
        self._listener: socket.socket | None = None

    def url_for(self, url: str) -> str:
        """`url` (host:port of the target) pointed at this proxy instead."""
        host, port = self.target
        return url.replace(f"{host}:{port}", f"127.0.0.1:{self.port}")

    def start(self) -> TcpProxy:
        import threading

        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        self._open.set()
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def _accept(self, listener: socket.socket) -> None:
        import threading

        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stop()
            with self._lock:
                self._conns.append(client)
            if not self._open.is_set():
                continue  # accepted into the black hole: never answered
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                self._reset(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if self._open.is_set():
                    dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    @staticmethod
    def _reset(s: socket.socket) -> None:
        try:  # SO_LINGER 0: close sends a reset
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def cut(self) -> None:
        """Partition: from now on nothing crosses, and nobody is told."""
        self._open.clear()

    def restore(self) -> None:
        """The link is back: what was connected across the cut is reset."""
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            self._reset(s)
        self._open.set()

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self.restore()
