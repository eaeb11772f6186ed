"""`tpuq run -- CMD`: an interactive session. It waits in the queue like any job, then
runs CMD on this terminal (a pseudo-terminal whose slave end the host's agent gives the
job); the exit status is the job's own.

The agent stays the owner of the process (chips, lease, time limit, notices, accounting):
only the terminal is handed over (tpuq/terminal.py, tpuq/agent/local/terminals.py).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import click

from tpuq.cli import context
from tpuq.cli.args import JOB_ID
from tpuq.cli.errors import UserError
from tpuq.cli.submitting import build_command
from tpuq.spec import SpecError
from tpuq.submitopts import SubmitOptions

if TYPE_CHECKING:
    from tpuq.settings import Settings
    from tpuq.terminal import Pty

WAITING = ("queued", "held")
ENDED = ("succeeded", "failed", "cancelled", "timeout")
POLL_S = 0.5
SSH_FAILED = 255  # OpenSSH's own status when it could not connect


@click.command(context_settings={"ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--chips", type=int, envvar="TPUQ_CHIPS",
              help="Chips the session owns (default: the whole host).")
@click.option("--tpu-type", envvar="TPUQ_JOB_TPU_TYPE", help="Only hosts of this type, e.g. v4-8.")
@click.option("--time", "time_limit", envvar="TPUQ_TIME_LIMIT",
              help="Time limit, e.g. 1h; the session is told a minute before, then stopped.")
@click.option("--name", envvar="TPUQ_JOB_NAME", help="A name to recognise the session by.")
@click.option("--team", envvar="TPUQ_TEAM", help="Team to charge (default from configuration).")
@click.option("--priority", type=int, default=0, show_default=True, envvar="TPUQ_PRIORITY",
              help="Higher runs first within your team's fair share.")
@click.option("--signal", "stop_signal", default="SIGHUP", show_default=True,
              envvar="TPUQ_RUN_SIGNAL",
              help="Signal that stops the session (SIGHUP: what a closed terminal sends).")
@click.option("--grace", envvar="TPUQ_GRACE",
              help="Time between the stop signal and SIGKILL (default: TPUQ_DEFAULT_GRACE_S).")
@click.option("--export", "export", default="ALL", show_default=True, envvar="TPUQ_EXPORT",
              metavar="ALL|NONE|VAR,...", help="Which of this shell's variables the session gets.")
@click.option("--ssh/--no-ssh", "use_ssh", default=True, show_default=True,
              envvar="TPUQ_RUN_SSH",
              help="From a machine without an agent: attach over `ssh -t HOST` once the "
                   "session's host is known (--no-ssh: say what to run there).")
@click.option("--remote-tpuq", envvar="TPUQ_RUN_REMOTE_TPUQ", metavar="PATH", default="",
              help="tpuq on the session's host, over SSH (default: `tpuq` on its PATH, "
                   "else /opt/tpuq/venv/bin/tpuq).")
@click.option("--attach", "attach_id", type=JOB_ID, metavar="ID",
              help="Attach this terminal to session ID, queued by `tpuq run` elsewhere "
                   "(run it on the session's host, as `tpuq run` says).")
def run(command: tuple[str, ...], chips: int | None, tpu_type: str | None,
        time_limit: str | None, name: str | None, team: str | None, priority: int,
        stop_signal: str, grace: str | None, export: str, use_ssh: bool, remote_tpuq: str,
        attach_id: int | None) -> None:
    """Run a command interactively on a TPU host: it waits in the queue like any job,
    then runs on this terminal, owning its chips; exits with the command's status.

    \b
      tpuq run --chips 4 --time 1h -- bash          a shell that owns 4 chips
      tpuq run --chips 1 --time 4h -- jupyter lab   a chip for a notebook
      tpuq run -- python -i                         Python with the whole host

    Ctrl-C reaches the command; closing the terminal stops the session. A session is
    never requeued: a preemption or maintenance notice is printed in it, then it stops.
    """
    cfg = context.settings()
    if attach_id is not None:
        if command:
            raise UserError("--attach ID takes no command: the session has its own")
        raise SystemExit(_session(cfg, attach_id, Remote(use_ssh, remote_tpuq),
                                  submitted=False))
    if not command:
        raise UserError("what to run? e.g. `tpuq run --chips 1 -- bash`")
    opts = SubmitOptions(name=name, chips=chips, tpu_type=tpu_type, team=team,
                         priority=priority, export=export, stop_signal=stop_signal,
                         grace=grace, time_limit=time_limit, max_retries=0, requeue=False,
                         session=True)
    try:
        spec = opts.spec(build_command(command, None), cfg)
    except SpecError as e:
        raise UserError(str(e)) from None
    from tpuq import localclient
    from tpuq.protocol import Submitted

    if cfg.embedded and localclient.ping(cfg.socket_path) is None:
        raise UserError("no agent is running on this VM; start one with `tpuq agent`")
    job_id = context.ask(opts.request(spec), Submitted).id
    raise SystemExit(_session(cfg, job_id, Remote(use_ssh, remote_tpuq), submitted=True))


class Remote:
    """How a session on another machine is reached: `ssh -t` (use_ssh), else words."""

    def __init__(self, use_ssh: bool, remote_tpuq: str) -> None:
        self.use_ssh = use_ssh
        self.remote_tpuq = remote_tpuq

    def command(self, job_id: int) -> str:
        """What runs on the session's host: its tpuq, found as `tpuq pod` finds it."""
        import shlex

        from tpuq.pod.clean import INSTALLED

        find = (f"T={shlex.quote(self.remote_tpuq)}" if self.remote_tpuq else
                f"T=$(command -v tpuq || echo {INSTALLED})")
        return (f"[ -r /etc/profile.d/tpuq.sh ] && . /etc/profile.d/tpuq.sh; {find}; "
                f'exec "$T" run --attach {job_id}')


def _session(cfg: Settings, job_id: int, remote: Remote, *, submitted: bool) -> int:
    """The session from here to its end: its exit status."""
    from tpuq.terminal import Pty

    pty = Pty()
    try:
        attached_here = _attach(cfg, job_id, pty, quiet=submitted)
        try:
            job = _wait_start(job_id)
        except KeyboardInterrupt:
            job = None
        if job is None:  # Ctrl-C, or the terminal went away, while it waited
            _cancel(job_id)
            _say(f"cancelled session {job_id}")
            return 130
        if job["state"] in ENDED:
            return _ended(job)
        if attached_here is None or job["host"] != attached_here:
            pty.close()
            return _elsewhere(job_id, str(job["host"]), remote)
        return _attached(job_id, pty)
    finally:
        pty.close()


def _attach(cfg: Settings, job_id: int, pty: Pty, quiet: bool) -> str | None:
    """Hand the session's terminal to this machine's agent: the agent's host, or None
    when no agent of this deployment is here (the session then runs elsewhere)."""
    from tpuq import localclient
    from tpuq.protocol import AttachTerminal, Done, Refusal

    pong = localclient.ping(cfg.socket_path)
    if pong is None or (cfg.socket_deployment not in (None, pong.deployment)):
        if not quiet:
            raise UserError(f"no agent answers at {cfg.socket_path}: run `tpuq run --attach "
                            f"{job_id}` on the session's host")
        return None
    req = AttachTerminal(id=job_id, deployment=cfg.socket_deployment,
                         as_user=cfg.user or None)
    try:
        reply = localclient.call(cfg.socket_path, req, fds=[pty.slave])
    except OSError as e:
        raise UserError(f"could not hand the terminal to the agent: {e}") from None
    if isinstance(reply, Refusal):
        raise UserError(reply.error)
    assert isinstance(reply, Done)
    pty.close_slave()
    return pong.host


def _wait_start(job_id: int) -> dict[str, Any] | None:
    """The job once it starts (or ended first), saying meanwhile why it waits; None when
    the caller's terminal went away (SIGHUP, SIGTERM) meanwhile."""
    import signal

    from tpuq.protocol import JobDetail, ShowJob

    gone: list[int] = []
    old = {s: signal.signal(s, lambda n, _f: gone.append(n))
           for s in (signal.SIGHUP, signal.SIGTERM)}
    try:
        return _waiting(job_id, lambda: context.ask(ShowJob(id=job_id), JobDetail).job, gone)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _waiting(job_id: int, show: Any, gone: list[int]) -> dict[str, Any] | None:
    shown, began = "", time.monotonic()
    on_tty = sys.stderr.isatty()
    while not gone:
        job: dict[str, Any] = show()
        state = job["state"]
        if state not in WAITING:
            if shown and on_tty:
                click.echo("", err=True)
            if state not in ENDED:
                where = f" on {job['host']}" if job.get("host") else ""
                _say(f"session {job_id} starts{where}")
            return job
        why = job.get("waiting_for") or job.get("reason") or state
        line = f"session {job_id} waits: {why} ({_waited(time.monotonic() - began)})"
        if on_tty:
            click.echo(f"\r[tpuq: {line}]\x1b[K", nl=False, err=True)
        elif why != shown:
            _say(line)
        shown = why
        time.sleep(POLL_S)  # a signal's handler returns here; the loop then looks
    return None


def _attached(job_id: int, pty: Pty) -> int:
    """Copy the terminal until the session's side closes, then its exit status."""
    from tpuq.terminal import GONE, relay

    how = relay(pty.master, ended=lambda: _show(job_id)["state"] in ENDED)
    if how == GONE:  # a stop request first: it decides how the session counts
        import signal

        for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)  # more of the hangup must not cut it short
        _cancel(job_id)
        pty.close()  # the session's terminal hangs up too
        return 129
    pty.close()
    from tpuq.cli.wait import wait_for

    wait_for([job_id], say=False)
    return _ended(_show(job_id))


def _elsewhere(job_id: int, host: str, remote: Remote) -> int:
    """The session starts on another machine: attach there over SSH, else say how."""
    import shutil
    import subprocess

    attach = f"ssh -t {host} tpuq run --attach {job_id}"
    if remote.use_ssh and shutil.which("ssh") and sys.stdin.isatty():
        _say(f"session {job_id} runs on {host}: attaching over SSH ({attach})")
        code = subprocess.call(["ssh", "-t", host, remote.command(job_id)])
        job = _show(job_id)
        if job["state"] in ENDED:
            return code if code != SSH_FAILED else _ended(job)
        _say(f"no terminal reached session {job_id} over SSH (status {code})")
    _say(f"session {job_id} runs on {host}; attach this terminal there: {attach}")
    from tpuq.cli.wait import wait_for

    wait_for([job_id], say=False)
    return _ended(_show(job_id))


def _ended(job: dict[str, Any]) -> int:
    """The session's exit status: the command's own (128 + a signal that ended it), else
    what `tpuq wait` says of its state."""
    from tpuq.cli.wait import outcome_exit

    code, sig = job.get("exit_code"), job.get("exit_signal")
    if job["state"] != "succeeded":
        _say(f"session {job['id']} {job['state']}: {job.get('reason') or ''}".rstrip(": "))
    if isinstance(code, int):
        return code
    if isinstance(sig, int):
        return 128 + sig
    return outcome_exit(str(job["state"]))


def _show(job_id: int) -> dict[str, Any]:
    from tpuq.protocol import JobDetail, ShowJob

    return context.ask(ShowJob(id=job_id), JobDetail).job


def _cancel(job_id: int) -> None:
    from tpuq.client import ClientError
    from tpuq.protocol import Action, Control, Results

    try:
        context.ask(Control(action=Action.CANCEL, ids=[job_id]), Results)
    except ClientError:
        pass  # ended meanwhile


def _say(text: str) -> None:
    click.echo(f"[tpuq: {text}]", err=True)


def _waited(seconds: float) -> str:
    s = int(seconds)
    return f"waited {s // 60}m{s % 60:02d}s" if s >= 60 else f"waited {s}s"


COMMANDS = [run]
