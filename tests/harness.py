"""End-to-end harness: real `tpuq agent` processes on fake TPU hosts.

A fake host is a directory of device files (`accel0..N`), its own TPUQ_HOME (or a shared
database for the team deployment), a boot id file the test can change, a machine id of
its own (a VM of its own), and a libtpu lock path in the temp dir. Waits poll the
database for the state a test expects; they never sleep a fixed time hoping something
happened.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tpuq.state.db import Database
from tpuq.state.models import Attempt, GangWorker, Host, Job

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
TPUQ = [sys.executable, "-c", "from tpuq.cli.entry import main; main()"]
T = TypeVar("T")


def wait_for(pred: Callable[[], T], timeout: float = 30.0, what: str = "condition",
             interval: float = 0.05, on_timeout: Callable[[], str] | None = None) -> T:
    """Poll `pred` until it returns something truthy; fail the test with `what` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            more = f"\n{on_timeout()}" if on_timeout is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{more}")
        time.sleep(interval)


@dataclass
class FakeHost:
    """A TPU host made of files: device nodes, boot id, libtpu lock path."""

    root: Path
    name: str = "tpu-a"
    chips: int = 4

    def __post_init__(self) -> None:
        self.dev = self.root / "dev"
        self.dev.mkdir(parents=True, exist_ok=True)
        for i in range(self.chips):
            (self.dev / f"accel{i}").touch()
        self.boot_id_file = self.root / "boot_id"
        if not self.boot_id_file.exists():
            self.reboot()
        self.machine_id_file = self.root / "machine_id"
        if not self.machine_id_file.exists():
            self.machine_id_file.write_text(os.urandom(16).hex() + "\n")

    def reboot(self) -> None:
        """What the kernel does at boot: a new random boot id."""
        self.boot_id_file.write_text(os.urandom(16).hex() + "\n")

    @property
    def lockfile(self) -> Path:
        return self.root / "libtpu_lockfile"

    def env(self) -> dict[str, str]:
        return {
            "TPUQ_HOST": self.name,
            "TPUQ_DEVICE_GLOB": str(self.dev / "accel*"),
            "TPUQ_BOOT_ID_FILE": str(self.boot_id_file),
            "TPUQ_MACHINE_ID_FILE": str(self.machine_id_file),
            "TPUQ_LIBTPU_LOCKFILE": str(self.lockfile),
            "TPUQ_TPU_LOGS_DIR": str(self.root / "tpu_logs"),
            "TPUQ_LOCK_DIR": str(self.root / "locks"),
            "TPUQ_PCI_DIR": str(self.root / "pci"),
        }


@dataclass
class Stack:
    """Settings shared by every process of one test: CLI, agents, checks."""

    home: Path
    extra: dict[str, str] = field(default_factory=dict)
    agents: list[AgentProc] = field(default_factory=list)

    def env(self, host: FakeHost | None = None, **more: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TPUQ_")}
        # as in a shell with the venv activated: `python` is the test's interpreter
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        env.update({
            "TPUQ_HOME": str(self.home), "TPUQ_HEARTBEAT_S": "0.5", "TPUQ_POLL_S": "0.5",
            "TPUQ_LEASE_S": "3", "TPUQ_HOST_STALE_S": "5", "TPUQ_RETRY_BACKOFF_S": "0.2",
            "TPUQ_USER": "tester", "JAX_PLATFORMS": "cpu",
            # tables wide enough for whole reasons: they quote temporary paths, which are
            # longer under pytest-xdist (popen-gwN); tests/cli checks the cut at 80 columns
            "COLUMNS": "400",
            # agents' notes stay in the test's directory, never the machine's /run/tpuq
            "TPUQ_ANNOUNCE_DIR": str(self.home.parent / "announce"),
        })
        env.update(self.extra)
        if host is not None:
            env.update(host.env())
        env.update(more)
        return env

    def keepers(self, host: FakeHost | None = None) -> list[int]:
        """Pids of the attempt keepers this test's agents started (they outlive agents;
        only `host`'s, if given): forked from `python -m tpuq.agent.keeper.pool
        <home>/run/<host>` (`tpuq.agent.keeper.process` or `tpuq.agent.keeper` in earlier
        releases, whose agents the upgrade tests start), they carry its command line."""
        # an agent may have been given a state directory of its own (TPUQ_HOME)
        homes = {str(self.home), *(a.env["TPUQ_HOME"] for a in self.agents
                                   if "TPUQ_HOME" in a.env)}
        marks = [f"{home}/run/{host.name if host else ''}".encode() for home in homes]
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if b"tpuq.agent.keeper" in cmdline and any(m in cmdline for m in marks):
                found.append(int(name))
        return found

    def leftovers(self, jobs: tuple[str, ...] = ()) -> list[str]:
        """Processes of this test that have no reason to be alive: a keeper server whose
        agent is not running, more idle keepers than a live pool keeps, a keeper of an
        attempt that is over (call this once every job ended), a job's process (one
        whose command line holds every string of `jobs`)."""
        from tpuq.agent.keeper.pool import POOL

        procs = _processes()
        agents = {a.pid for a in self.agents if a.proc is not None and a.proc.poll() is None}
        keepers = [p for p in self.keepers() if p in procs]
        servers = {p for p in keepers if procs[p][0] in agents}
        parents = {ppid for ppid, _ in procs.values()}
        spares = [p for p in keepers if procs[p][0] in servers and p not in parents]
        allowed = servers | {p for srv in servers
                             for p in [q for q in spares if procs[q][0] == srv][:POOL]}
        bad = [f"keeper {p} (parent {procs[p][0]}): {procs[p][1]!r}" for p in keepers
               if p not in allowed]
        if jobs:
            bad += [f"job process {pid}: {cmd!r}" for pid, (_, cmd) in procs.items()
                    if all(j.encode() in cmd for j in jobs)]
        return bad

    def kill_keepers(self, host: FakeHost | None = None) -> None:
        """As a host's death or reboot would (every keeper of this test, by default)."""
        _signal_all(self.keepers(host), signal.SIGKILL)

    def _kill_keepers_and_their_jobs(self) -> None:
        """Every keeper of this test and the process group of each job a keeper started
        (a job whose pid its agent had not yet written down when the agent was killed
        has no other trace). The keepers are stopped first, so none starts a job after
        its children were listed."""
        keepers = self.keepers()
        _signal_all(keepers, signal.SIGSTOP)
        parents = set(keepers)
        jobs = [pid for pid, (ppid, _) in _processes().items() if ppid in parents]
        _signal_all(keepers, signal.SIGKILL)
        for pid in jobs:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    @property
    def db(self) -> Database:
        if not hasattr(self, "_db"):
            url = self.extra.get("TPUQ_DATABASE_URL") or f"sqlite:///{self.home}/tpuq.db"
            self._db = Database(url)
        return self._db

    # ---- the CLI ---------------------------------------------------------------------
    def tpuq(self, *args: str, check: bool = True, cwd: str | Path | None = None,
             command: Sequence[str] = TPUQ, **env: str) -> subprocess.CompletedProcess[str]:
        """`command`: another tpuq's (tests/releases.py), else this one's."""
        r = subprocess.run([*command, *args], env=self.env(**env), cwd=cwd, text=True,
                           capture_output=True, timeout=120)
        if check and r.returncode != 0:
            raise AssertionError(f"tpuq {' '.join(args)} exited {r.returncode}:\n{r.stderr}")
        return r

    def submit(self, *args: str, cwd: str | Path | None = None, **env: str) -> int:
        return int(self.tpuq("submit", "-q", *args, cwd=cwd, **env).stdout.strip())

    def start_agent(self, host: FakeHost, command: Sequence[str] = TPUQ, **env: str) -> AgentProc:
        a = AgentProc(self, host, env, command)
        self.agents.append(a)  # before it starts: cleanup() stops it whatever happens
        a.start()
        return a

    # ---- reading the truth -----------------------------------------------------------------
    def job(self, job_id: int) -> Job:
        with self.db.read() as s:
            job = s.get(Job, job_id)
            assert job is not None, f"job {job_id} missing"
            return job

    def job_count(self) -> int:
        """Jobs in the queue's database (0 when the embedded database was never made)."""
        if "TPUQ_DATABASE_URL" not in self.extra and not (self.home / "tpuq.db").exists():
            return 0
        with self.db.read() as s:
            return s.query(Job).count()

    def attempts(self, job_id: int) -> list[Attempt]:
        with self.db.read() as s:
            return list(s.query(Attempt).filter_by(job_id=job_id).order_by(Attempt.number))

    def checkpoint_dir(self, job_id: int) -> Path:
        """TPUQ_CHECKPOINT_DIR of a job of this database (agent/attempts/workdirs.py)."""
        from tpuq.state.queries import instance_id

        with self.db.read() as s:
            instance = instance_id(s)
        return self.home / "checkpoints" / instance[:12] / str(job_id)

    def host(self, name: str) -> Host | None:
        with self.db.read() as s:
            return s.get(Host, name)

    def wait_state(self, job_id: int, *states: str, timeout: float = 30.0) -> Job:
        def check() -> Job | None:
            job = self.job(job_id)
            return job if job.state in states else None

        try:
            return wait_for(check, timeout, f"job {job_id} to be {'/'.join(states)}")
        except AssertionError as e:
            job = self.job(job_id)
            raise AssertionError(f"{e}; it is {job.state} ({job.reason})\n{self.diagnose()}") from None

    def wait_process(self, job_id: int, timeout: float = 30.0) -> Attempt:
        """The job's running attempt once its process is recorded. `running` alone is not
        enough: the state changes before the spawn, the pid is written just after it."""
        def check() -> Attempt | None:
            if self.job(job_id).state != "running":
                return None
            last = self.attempts(job_id)[-1]
            return last if last.pid and last.proc_start else None

        return wait_for(check, timeout, f"job {job_id} to run with its process recorded")

    def wait_all(self, ids: list[int], *states: str, timeout: float = 60.0) -> list[Job]:
        return [self.wait_state(i, *states, timeout=timeout) for i in ids]

    def log_text(self, job_id: int) -> str:
        return "".join(Path(a.log_path).read_text() for a in self.attempts(job_id)
                       if a.log_path and Path(a.log_path).exists())

    def wait_log(self, job_id: int, text: str, timeout: float = 30.0) -> None:
        wait_for(lambda: text in self.log_text(job_id), timeout, f"{text!r} in job {job_id} log")

    def diagnose(self) -> str:
        return "\n".join(f"--- agent {a.host.name} log:\n{a.log_tail()}" for a in self.agents)

    def cleanup(self) -> None:
        """Stop every agent, keeper and job process this test started, by pid."""
        for a in self.agents:
            a.kill()
        self._kill_keepers_and_their_jobs()
        try:
            with self.db.read() as s:
                pids = [(a.pid, a.proc_start) for a in s.query(Attempt) if a.pid]
                pids += [(g.pid, g.proc_start) for g in s.query(GangWorker) if g.pid]
        except Exception:  # noqa: BLE001 - the database may be gone or never created
            pids = []
        from tpuq.agent.tpu.holders import is_same_process

        for pid, start in pids:
            if start and is_same_process(pid, start):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if hasattr(self, "_db"):
            self._db.dispose()


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _processes() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, command line) of every process alive (zombies left out)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            found[int(name)] = (int(fields[1]), cmdline.replace(b"\0", b" "))
    return found


class AgentProc:
    """One `tpuq agent` process for a fake host."""

    def __init__(self, stack: Stack, host: FakeHost, env: dict[str, str],
                 command: Sequence[str] = TPUQ) -> None:
        self.stack = stack
        self.host = host
        self.env = env
        self.command = list(command)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = host.root / "agent.log"

    def start(self, wait: bool = True) -> AgentProc:
        self._log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")
        # from the host's directory: another tpuq's `python -m tpuq.agent.keeper.pool` must not
        # import this checkout's tpuq from the working directory
        self.proc = subprocess.Popen([*self.command, "agent"],
                                     env=self.stack.env(self.host, **self.env),
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=self.host.root)
        log.close()
        if wait:
            try:
                wait_for(self._ready, 60, f"agent {self.host.name} to start",
                         on_timeout=self.log_tail)
            except BaseException:  # never leave an agent the test does not know of
                self.kill()
                raise
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"agent exited {self.proc.returncode}:\n{self.log_tail()}")
        return "agent on " in self.log_path.read_text()[self._log_from:]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (graceful) and wait for the agent to exit."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: the host's agent dies without any cleanup."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def log_since_start(self) -> str:
        """Everything this agent logged since its last start (the file is shared by the
        host's agents over restarts)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_from)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text()[-n:]
        except FileNotFoundError:
            return ""


# what another account needs on PYTHONPATH to run tpuq with the test venv's packages
PYTHONPATH = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])


def python_for(uid: int, gid: int) -> str | None:
    """An interpreter that account may run with tpuq importable (the test venv's may lie
    where only root can reach it, e.g. a pyenv under /root), or None."""
    for exe in (sys.executable, "/usr/bin/python3"):
        try:
            ok = subprocess.run([exe, "-c", "import click, sqlalchemy, tpuq"], user=uid,
                                group=gid, extra_groups=[], capture_output=True, timeout=60,
                                env={"PYTHONPATH": PYTHONPATH}, cwd="/").returncode == 0
        except OSError:
            ok = False
        if ok:
            return exe
    return None


def step_delay(script: str) -> str:
    """Seconds per training step for an example that a test preempts.

    JAX's preemption sync point is agreed through its coordination service (a SIGTERM
    poller that wakes once a second, then a key-value round trip and a barrier): a run
    with much shorter steps can finish before the agreed step exists, and exits 0 as if
    never signalled (seen in CI at 0.02 s/step, and once in ~6 runs at 0.05 s/step on
    2 loaded cores). The delay costs only the steps run before the notice lands; it sets
    the margin, not the test's length. `tpuq.job` sets its flag in the handler itself.
    """
    return "0.2" if "orbax" in script else "0.05"


def fixture_cmd(name: str, *args: Any) -> list[str]:
    """`-- python tests/fixtures/<name> args...` for tpuq submit."""
    return ["--", sys.executable, str(FIXTURES / name), *map(str, args)]
