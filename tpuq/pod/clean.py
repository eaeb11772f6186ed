"""`tpuq pod clean`: free the TPU on every worker, safely.

On each worker, `tpuq pod clean --local` runs (over SSH, as root through `sudo -n` when
the SSH user is not root). There it asks the host's agent, which knows its own attempts:
it kills tpuq's orphans, names every other holder, and removes a stale libtpu lock only
when nobody holds the devices (`tpuq/agent/tpu/cleanup.py`). Where no agent answers, the same
function runs in place, killing nothing: it names the processes holding `/dev/accel*` or
`/dev/vfio/*` and removes a stale lock only if none does. Never `rm -rf`: a lock file
removed under a live holder makes a new inode, and two processes then share the TPU.

Without the login profile (SSH commands do not read /etc/profile.d) and under sudo, the
worker's agent settings are read from its env file (/etc/tpuq/agent.env, root's alone),
for what the environment does not set: where the agent's socket is, which device files
and lock the host has.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from typing import Any

from tpuq import localclient
from tpuq import settings as settings_mod
from tpuq.agent.tpu import cleanup
from tpuq.errors import Failure, TpuqError
from tpuq.pod import ssh
from tpuq.pod.hosts import Worker
from tpuq.protocol import CleanTpu, Refusal, TpuCleaned

AGENT_ENV = "/etc/tpuq/agent.env"
INSTALLED = "/opt/tpuq/venv/bin/tpuq"  # where `tpuq pod setup` installs tpuq on a worker
NOT_INSTALLED = 127


class CleanError(TpuqError):
    """The host's TPU could not be cleaned (the agent refused, or did not answer)."""

    KIND = Failure.UNAVAILABLE


def agent_env(path: str) -> dict[str, str]:
    """TPUQ_* settings of an agent env file (systemd EnvironmentFile lines); {} when it
    cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    values = {}
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if sep and key in settings_mod.ENV.values() and value:
            values[key] = value.strip().strip('"')
    return values


def local_settings(env_file: str) -> settings_mod.Settings:
    """This host's settings: the environment, then the agent's env file."""
    return settings_mod.load({**agent_env(env_file), **os.environ})


def clean_here(cfg: settings_mod.Settings) -> dict[str, Any]:
    """Free this host's TPU: through its agent if one answers, else in place.
    {"via": "agent" | "direct", "host", "report": CleanReport.as_dict()}."""
    try:
        reply = localclient.call(cfg.socket_path, CleanTpu(), timeout=60.0)
    except localclient.AgentUnavailable:
        report = cleanup.free_tpu(cfg, cleanup.tpu_paths(cfg))
        return {"via": "direct", "host": cfg.host, "report": report.as_dict()}
    except (localclient.AgentNoAnswer, localclient.AgentSkew) as e:
        raise CleanError(str(e)) from None
    if isinstance(reply, Refusal):
        raise CleanError(f"the agent refused: {reply.error}")
    if not isinstance(reply, TpuCleaned):
        raise CleanError(f"the agent answered {reply.NAME!r}")
    return {"via": "agent", "host": cfg.host, "report": reply.report}


@dataclass
class WorkerClean:
    """One worker's answer, or why there is none."""

    worker: Worker
    via: str = ""
    host: str = ""
    report: cleanup.CleanReport = field(default_factory=cleanup.CleanReport)
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {**self.worker.as_dict(), "via": self.via, "host_name": self.host,
                "error": self.error, **({} if self.error else self.report.as_dict())}


def remote_command(remote_tpuq: str, sudo: bool) -> str:
    """`tpuq pod clean --local --json` on a worker, as root when `sudo`."""
    find = (f"T={shlex.quote(remote_tpuq)}" if remote_tpuq else
            f"T=$(command -v tpuq || echo {INSTALLED})")
    become = 'S=; [ "$(id -u)" = 0 ] || S="sudo -n"' if sudo else "S="
    return "\n".join([
        "[ -r /etc/profile.d/tpuq.sh ] && . /etc/profile.d/tpuq.sh",
        find,
        f'command -v "$T" >/dev/null 2>&1 || {{ echo "$T: not found" >&2; exit {NOT_INSTALLED}; }}',
        become,
        # sudo resets the environment: the agent's socket is handed over explicitly
        'exec $S env ${TPUQ_AGENT_SOCKET:+TPUQ_AGENT_SOCKET="$TPUQ_AGENT_SOCKET"} '
        '"$T" pod clean --local --json',
    ])


def clean_worker(w: Worker, opts: ssh.SshOptions, command: str) -> WorkerClean:
    result = WorkerClean(w)
    try:
        conn = ssh.connect(w, opts)
    except ssh.SshError as e:
        result.error = str(e).split(": ", 1)[-1]
        return result
    try:
        status, out, err = ssh.capture(conn, command)
    except Exception as e:  # noqa: BLE001 - a connection lost mid-way: this worker only
        result.error = f"connection lost: {e}"
        return result
    finally:
        ssh.close(conn)
    if status == NOT_INSTALLED:
        result.error = "tpuq is not installed there (`tpuq pod setup` installs it)"
        return result
    try:
        data = json.loads(out)
        result.via, result.host = str(data["via"]), str(data["host"])
        result.report = cleanup.CleanReport.from_dict(data["report"])
    except (ValueError, KeyError, TypeError):
        result.error = ssh.failure(status, err)
    return result


def clean_pod(workers: list[Worker], opts: ssh.SshOptions, remote_tpuq: str = "",
              sudo: bool = True) -> list[WorkerClean]:
    """Every worker's clean, in worker order."""
    command = remote_command(remote_tpuq, sudo)
    return ssh.in_parallel(workers, lambda w: clean_worker(w, opts, command))
