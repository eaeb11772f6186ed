"""An embedded tpuq stack for benchmarks: a temp TPUQ_HOME, fake chips, one agent.

    with EmbeddedStack() as stack:
        stack.submit_argv(["/bin/true"])      # argv of the real `tpuq submit -q -- ...`
        stack.submit_socket(["/bin/true"])    # the agent socket directly (no CLI start-up)
        stack.wait_ended([job_id])
        stack.kill_agent(); stack.restart_agent()   # a crash, then a fresh agent

`bench/team.py`'s TeamStack is the same with PostgreSQL and Redis. The agent is started
as a child process and stopped by its pid only (SIGTERM, then SIGKILL if it does not
stop, or SIGKILL at once with `kill_agent`); the temp home is removed afterwards unless `keep=True`.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self

BIN = Path(sys.executable).parent  # the venv's bin/, where `tpuq` is installed
TPUQ = str(BIN / "tpuq")
CHIPS = 4
TERMINAL = ("succeeded", "failed", "cancelled")


class BenchError(RuntimeError):
    """The benchmark itself could not run (not a slow tpuq: that is only reported)."""


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float,
             what: str) -> Any:
    """Poll `predicate` until it returns something truthy; BenchError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def clean_environ(home: str) -> dict[str, str]:
    """This process's environment without any TPUQ_* of the caller, pointed at `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUQ_")}
    env.update({
        "TPUQ_HOME": home,
        "TPUQ_DEVICE_GLOB": os.path.join(home, "dev", "accel*"),
        "TPUQ_LIBTPU_LOCKFILE": os.path.join(home, "libtpu_lockfile"),
        "TPUQ_TPU_LOGS_DIR": os.path.join(home, "tpu_logs"),
        "TPUQ_HOST": "bench-host",
        "TPUQ_ANNOUNCE_DIR": os.path.join(home, "announce"),  # not the machine's /run/tpuq
    })
    return env


class EmbeddedStack:
    def __init__(self, agent_argv: Sequence[str] | None = None, keep: bool = False,
                 start_timeout: float = 30.0, extra_env: dict[str, str] | None = None,
                 submit_via_db: bool = False) -> None:
        """`submit_via_db`: queue jobs through the state API rather than the agent's socket,
        and know the agent is up from its log: what an agent of another commit (another
        socket protocol) understands as well (bench/compare_turnover.py)."""
        self.agent_argv = list(agent_argv or [TPUQ, "agent"])
        self.submit_via_db = submit_via_db
        self.keep = keep
        self.extra_env = dict(extra_env or {})
        self.start_timeout = start_timeout
        self.home = ""
        self.env: dict[str, str] = {}
        self.agent: subprocess.Popen[bytes] | None = None
        self.agent_started_at = 0.0  # time.time() just before the agent was launched
        self._log_from = 0
        self._db: Any = None

    # ---- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> Self:
        self.home = tempfile.mkdtemp(prefix="tpuq-bench-")
        try:
            os.makedirs(os.path.join(self.home, "dev"))
            for i in range(CHIPS):
                Path(self.home, "dev", f"accel{i}").touch()
            self.env = clean_environ(self.home)
            self.env.update(self.extra_env)
            self._prepare()
            self._start_agent()
        except BaseException:
            self.close()
            raise
        return self

    def _prepare(self) -> None:
        """Services the agent needs before it starts (none for the embedded deployment)."""

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def socket_path(self) -> str:
        return os.path.join(self.home, "agent.sock")

    @property
    def agent_log(self) -> str:
        return os.path.join(self.home, "agent.log")

    def _start_agent(self) -> None:
        """Launch `tpuq agent` and wait until it serves (see `_ready`)."""
        self.agent_started_at = time.time()
        self._log_from = os.path.getsize(self.agent_log) if os.path.exists(self.agent_log) else 0
        with open(self.agent_log, "ab") as log:
            self.agent = subprocess.Popen(self.agent_argv, env=self.env, cwd=self.home,
                                          stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT)

        def ready() -> bool:
            if self.agent is not None and self.agent.poll() is not None:
                raise BenchError(f"the agent exited with {self.agent.returncode} at start:\n"
                                 + self.log_tail())
            return self._ready()

        wait_for(ready, self.start_timeout, 0.02, "the agent to start")

    def _ready(self) -> bool:
        """The embedded agent is up once it answers a ping on its socket (or, when it
        may speak another protocol, once it logged that it started)."""
        if self.submit_via_db:
            return self._logged_start()
        from tpuq import localclient

        return localclient.ping(self.socket_path) is not None

    def _logged_start(self) -> bool:
        try:
            with open(self.agent_log, errors="replace") as f:
                f.seek(self._log_from)
                return "agent on " in f.read()
        except OSError:
            return False

    def kill_agent(self) -> None:
        """SIGKILL the agent we started (by pid), as a crash or a power cut would."""
        proc, self.agent = self.agent, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def kill_keepers(self) -> None:
        """SIGKILL the attempt keepers our agent started (they outlive it: found by their
        command line, `python -m tpuq.agent.keeper.pool <home>/run/...`), as a host's crash
        would take them with it."""
        mark = f"{self.home}/run/".encode()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                cmdline = open(f"/proc/{name}/cmdline", "rb").read()
            except OSError:
                continue
            if b"tpuq.agent.keeper." in cmdline and mark in cmdline:
                try:
                    os.kill(int(name), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def restart_agent(self) -> None:
        if self.agent is not None:
            raise BenchError("the agent is still running")
        self._start_agent()

    def stop_agent(self, timeout: float = 30.0) -> int | None:
        """SIGTERM the agent we started (by pid), SIGKILL it if it does not stop in time."""
        proc, self.agent = self.agent, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def close(self) -> None:
        try:
            self.stop_agent()
        finally:
            self.kill_keepers()  # a round that failed midway may leave attempts running
            if self._db is not None:
                self._db.dispose()
                self._db = None
            if self.home and not self.keep:
                shutil.rmtree(self.home, ignore_errors=True)

    def agent_cpu_s(self) -> float:
        """CPU seconds (user + system) the agent process itself has used so far."""
        if self.agent is None:
            raise BenchError("no agent running")
        with open(f"/proc/{self.agent.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.agent_log, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no agent log)"

    # ---- submitting -------------------------------------------------------------------------
    def submit_argv(self, command: Sequence[str]) -> list[str]:
        """The real CLI: `tpuq submit -q -- COMMAND...` (prints the job id)."""
        return [TPUQ, "submit", "-q", "--", *command]

    def run_cli(self, argv: Sequence[str]) -> str:
        """Run a tpuq command in the stack's environment; its stdout, BenchError on failure."""
        done = subprocess.run(argv, env=self.env, cwd=self.home, capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            raise BenchError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def submit_socket(self, command: Sequence[str]) -> int:
        """Queue a job through the agent's socket, as the CLI's fast path does."""
        from tpuq.spec import JobSpec

        return self.submit_spec(JobSpec(command=list(command), cwd=self.home,
                                        owner=getpass.getuser(), team="default",
                                        env={"PATH": self.env.get("PATH", "")}))

    def submit_spec(self, spec: Any) -> int:
        """Queue a tpuq.spec.JobSpec through the agent's socket; its job id."""
        from tpuq import localclient, protocol

        reply = localclient.call(self.socket_path, protocol.Submit(spec=spec.validate().to_dict()))
        if not isinstance(reply, protocol.Submitted):
            raise BenchError(f"the agent refused a job: {getattr(reply, 'error', reply)}")
        return reply.id

    def queue_jobs(self, command: Sequence[str], n: int) -> tuple[list[int], float]:
        """Queue `n` jobs running `command`; (their ids, ms per job spent submitting)."""
        if self.submit_via_db:
            return self.insert_jobs(command, n)
        t0 = time.perf_counter()
        ids = [self.submit_socket(command) for _ in range(n)]
        return ids, (time.perf_counter() - t0) * 1000.0 / n

    def insert_jobs(self, command: Sequence[str], n: int) -> tuple[list[int], float]:
        """n jobs through the state API in one transaction (jobs.submit); the ms per job
        are the database inserts only. Agents find them by polling, or by a wake-up."""
        from tpuq.spec import JobSpec
        from tpuq.state import jobs

        spec = JobSpec(command=list(command), cwd=self.home, owner=getpass.getuser(),
                       team="default", env={"PATH": self.env.get("PATH", "")}).validate()
        t0 = time.perf_counter()
        with self.db.write() as s:
            ids = [jobs.submit(s, spec) for _ in range(n)]
        return ids, (time.perf_counter() - t0) * 1000.0 / n

    # ---- reading the database --------------------------------------------------------------
    @property
    def db(self) -> Any:
        if self._db is None:
            from tpuq.state.db import Database

            self._db = Database(self.db_url)
        return self._db

    @property
    def db_url(self) -> str:
        return f"sqlite:///{os.path.join(self.home, 'tpuq.db')}"

    def jobs(self, ids: Sequence[int]) -> dict[int, tuple[str, float | None]]:
        """{job id: (state, ended_at)} for these jobs."""
        from tpuq.state.models import Job

        with self.db.read() as s:
            rows = s.query(Job.id, Job.state, Job.ended_at).filter(Job.id.in_(list(ids))).all()
        return {r.id: (r.state, r.ended_at) for r in rows}

    def state(self, job_id: int) -> str | None:
        row = self.jobs([job_id]).get(job_id)
        return row[0] if row else None

    def wait_ended(self, ids: Sequence[int], timeout: float, interval: float = 0.005) -> None:
        ids = list(ids)

        def all_ended() -> bool:
            rows = self.jobs(ids)
            return len(rows) == len(ids) and all(st in TERMINAL for st, _ in rows.values())

        try:
            wait_for(all_ended, timeout, interval, f"{len(ids)} job(s) to end")
        except BenchError as e:
            raise BenchError(f"{e}\nagent log:\n{self.log_tail()}") from None

    def wait_state(self, job_id: int, state: str, timeout: float) -> None:
        try:
            wait_for(lambda: self.state(job_id) == state, timeout, 0.005,
                     f"job {job_id} to be {state}")
        except BenchError as e:
            raise BenchError(f"{e}\nagent log:\n{self.log_tail()}") from None
