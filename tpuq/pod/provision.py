"""`tpuq pod setup`: a pod to a working team deployment in one command, idempotent.

1. Redis and PostgreSQL on host 0 (`services.sh`), unless their URLs are given;
2. on every worker at once, the deployment kit's own startup script
   (`workers/startup-script.sh`, in the package as `startup-script.sh`): tpuq in
   /opt/tpuq/venv, /etc/tpuq/agent.env, the systemd unit, the agent running;
3. `tpuq db upgrade` once, on host 0, with the tpuq just installed there: the agents run
   that version, so its migrations are the ones that count.

Every step says what it changed; a second run says there was nothing to change. Inputs
(the URLs carry passwords) travel in a file in a private temporary directory on the
worker, never on a command line, which every user of the worker can read.
"""

from __future__ import annotations

import io
import ipaddress
import re
import shlex
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tpuq.errors import Failure, TpuqError
from tpuq.pod import ssh
from tpuq.pod.hosts import Worker
from tpuq.pod.run import LinePrefixer

HERE = Path(__file__).resolve().parent
STARTUP_SCRIPT = HERE / "startup-script.sh"
SERVICES_SCRIPT = HERE / "services.sh"
VENV_TPUQ = "/opt/tpuq/venv/bin/tpuq"  # where the startup script installs it
_LOG_LOCK = threading.Lock()  # one worker's line at a time on the terminal
_CHANGES = re.compile(r"^tpuq-(?:startup|services): changes: (.*)$", re.MULTILINE)
_AGENT = re.compile(r"^tpuq-startup: tpuq-agent as (.*): (\S*)$", re.MULTILINE)
_UPGRADE = re.compile(r": (\S+) -> (\S+)$", re.MULTILINE)


@dataclass(frozen=True)
class SetupOptions:
    pip_spec: str
    database_url: str = ""
    broker_url: str = ""
    host_prefix: str = ""  # names the hosts PREFIX-w<i>; empty: the startup script decides
    services_addr: str = ""  # where workers reach host 0's services; empty: see services_address
    db_name: str = "tpuq"
    sudo: bool = True


@dataclass
class Step:
    """One step on one worker: what it changed, or why it failed."""

    worker: Worker
    step: str  # "services", "agent" or "database"
    changes: list[str] = field(default_factory=list)
    detail: str = ""
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {**self.worker.as_dict(), "step": self.step, "changes": self.changes,
                "detail": self.detail, "error": self.error}


class SetupError(TpuqError):
    """A step that the next ones need failed; the message says which and why."""

    KIND = Failure.UNAVAILABLE


def inputs_file(values: dict[str, str]) -> bytes:
    """KEY=VALUE lines a POSIX shell can source, whatever the values hold."""
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items() if v).encode()


def as_root(conn: Any, files: dict[str, bytes], command: str, sudo: bool,
            log: LinePrefixer) -> tuple[int | None, str, str]:
    """Run `command` as root in a private temporary directory holding `files` (as `$1`),
    with `inputs.env` exported; stderr streams to `log` as well. The directory is
    removed afterwards."""
    status, made, err = ssh.capture(conn, "umask 077 && mktemp -d /tmp/tpuq-setup.XXXXXX")
    if status != 0:
        raise SetupError(f"cannot make a temporary directory: {err.strip()}")
    tmp = made.strip()
    for name, data in files.items():
        conn.put(io.BytesIO(data), f"{tmp}/{name}")
    inner = f'set -a; . "$1/inputs.env"; set +a; {command}'
    become = 'S=; [ "$(id -u)" = 0 ] || S="sudo -n"; ' if sudo else "S=; "
    script = (f"d={shlex.quote(tmp)}; {become}$S sh -c {shlex.quote(inner)} tpuq-setup \"$d\"; "
              'rc=$?; rm -rf -- "$d"; exit $rc')
    out, err_kept = io.StringIO(), _Tee(log)
    try:
        status = ssh.stream(conn, script, out, err_kept)
    finally:
        log.close()
    return status, out.getvalue(), err_kept.getvalue()


class _Tee(io.StringIO):
    """Keeps what is written, and shows it as it comes."""

    def __init__(self, log: LinePrefixer) -> None:
        super().__init__()
        self.log = log

    def write(self, s: str) -> int:
        self.log.write(s)
        return super().write(s)


def changes_of(stderr: str) -> list[str]:
    found = _CHANGES.findall(stderr)
    if not found or found[-1] == "none":
        return []
    return [c for c in found[-1].split(";") if c]


def services_address(workers: list[Worker], conn0: Any) -> str:
    """Where the workers reach host 0: its address as listed, unless that is a loopback
    address while other workers are not (the podips.txt habit reaches host 0 as
    127.0.0.1): then the first address host 0 itself names."""
    def loopback(host: str) -> bool:
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return host == "localhost"

    w0 = workers[0]
    if not loopback(w0.host) or all(loopback(w.host) for w in workers):
        return w0.host
    status, out, _ = ssh.capture(conn0, "hostname -I")
    if status != 0 or not out.split():
        raise SetupError(f"{w0.name}: cannot tell its address for the other workers; "
                         "pass --services-address")
    return out.split()[0]


class PodSetup:
    def __init__(self, workers: list[Worker], ssh_opts: ssh.SshOptions, opts: SetupOptions,
                 log: IO[str]) -> None:
        self.workers, self.ssh_opts, self.opts, self.log = workers, ssh_opts, opts, log
        self.steps: list[Step] = []
        self.conns: dict[int, Any] = {}

    def _log(self, w: Worker) -> LinePrefixer:
        return LinePrefixer(f"[{w.name}] ", self.log, _LOG_LOCK)

    def run(self) -> list[Step]:
        conns = ssh.in_parallel(self.workers, lambda w: ssh.connect(w, self.ssh_opts))
        unreachable = [str(c) for c in conns if isinstance(c, Exception)]
        try:
            if unreachable:
                raise SetupError("; ".join(unreachable))
            self.conns = {w.index: c for w, c in zip(self.workers, conns)}
            urls = self.services()
            agents = ssh.in_parallel(self.workers, lambda w: self.agent(w, urls))
            self.steps += agents
            if not agents[0].error:
                self.steps.append(self.database(urls["database_url"]))
        finally:
            for c in conns:
                if not isinstance(c, Exception):
                    ssh.close(c)
        return self.steps

    def services(self) -> dict[str, str]:
        """The URLs the agents use: as given, or from the services set up on host 0."""
        urls = {"database_url": self.opts.database_url, "broker_url": self.opts.broker_url}
        want = [name for name, key in (("postgres", "database_url"), ("redis", "broker_url"))
                if not urls[key]]
        if not want:
            return urls
        w0, conn = self.workers[0], self.conns[0]
        addr = self.opts.services_addr or services_address(self.workers, conn)
        clients = " ".join(dict.fromkeys([addr, *(w.host for w in self.workers)]))
        inputs = {"TPUQ_SERVICES_ADDR": addr, "TPUQ_SERVICES_CLIENTS": clients,
                  "TPUQ_SERVICES_WANT": " ".join(want), "TPUQ_SERVICES_DB": self.opts.db_name}
        status, out, err = as_root(conn, {"inputs.env": inputs_file(inputs),
                                          "services.sh": SERVICES_SCRIPT.read_bytes()},
                                   'bash "$1/services.sh"', self.opts.sudo, self._log(w0))
        step = Step(w0, "services", changes_of(err), detail=f"at {addr}")
        self.steps.append(step)
        if status != 0:
            step.error = ssh.failure(status, err)
            raise SetupError(f"{w0.name}: Redis and PostgreSQL: {step.error}")
        for line in out.splitlines():
            key, _, value = line.partition("=")
            if key in urls and not urls[key]:
                urls[key] = value.strip()
        return urls

    def agent(self, w: Worker, urls: dict[str, str]) -> Step:
        """The deployment kit's startup script on one worker."""
        inputs = {"TPUQ_PIP_SPEC": self.opts.pip_spec,
                  "TPUQ_DATABASE_URL": urls["database_url"], "TPUQ_BROKER_URL": urls["broker_url"],
                  "TPUQ_HOST": f"{self.opts.host_prefix}-w{w.index}" if self.opts.host_prefix else ""}
        files = {"inputs.env": inputs_file(inputs), "startup-script.sh": STARTUP_SCRIPT.read_bytes()}
        status, _, err = as_root(self.conns[w.index], files, 'bash "$1/startup-script.sh"',
                                 self.opts.sudo, self._log(w))
        agent = _AGENT.findall(err)
        step = Step(w, "agent", changes_of(err),
                    detail=f"{agent[-1][0]}: {agent[-1][1]}" if agent else "")
        if status != 0:
            step.error = ssh.failure(status, err)
        return step

    def database(self, url: str) -> Step:
        """`tpuq db upgrade` once, on host 0, with the tpuq installed there."""
        w0 = self.workers[0]
        status, out, err = as_root(
            self.conns[0], {"inputs.env": inputs_file({"TPUQ_DATABASE_URL": url})},
            f"exec {VENV_TPUQ} db upgrade", self.opts.sudo, self._log(w0))
        step = Step(w0, "database", detail=out.strip())
        if status != 0:
            step.error = ssh.failure(status, err)
            return step
        moved = _UPGRADE.search(out.strip())
        if moved and moved.group(1) != moved.group(2):
            step.changes = [f"upgraded the schema {moved.group(1)} -> {moved.group(2)}"]
        return step


def setup_pod(workers: list[Worker], ssh_opts: ssh.SshOptions, opts: SetupOptions,
              log: IO[str]) -> list[Step]:
    """Set the pod up; every step, in order (module doc)."""
    return PodSetup(workers, ssh_opts, opts, log).run()

