"""`tpuq pod ...`: a TPU pod slice's plumbing over SSH, from host 0 (tpuq/pod/).

Fabric and Paramiko are imported inside the commands: `tpuq --help` and `tpuq submit`
never load them.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from tpuq.cli import context
from tpuq.cli.errors import Unavailable, UserError

if TYPE_CHECKING:
    from tpuq.pod.hosts import Pod
    from tpuq.pod.ssh import SshOptions

# every option shows its environment variable: a pod's settings live in a shell profile
option = functools.partial(click.option, show_envvar=True)
EXIT_HELD = 5  # `pod clean`: a TPU is still held (README "Exit status": not in a state that allows it)


def pod_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Which workers, and how to reach them: shared by every pod command."""
    for add in reversed([
        option("--hosts", envvar="TPUQ_POD_HOSTS", metavar="FILE|HOST,HOST,...",
                     help="The workers: a file (one [USER@]HOST[:PORT] per line, # comments) "
                          "or a comma-separated list. Default: the metadata server "
                          "TPUQ_METADATA_URL names, else ~/podips.txt, else GCE's."),
        option("--listed-only", is_flag=True, envvar="TPUQ_POD_LISTED_ONLY",
                     help="Use the listed hosts only, even when they do not include this "
                          "machine (by default it is added as w0: the podips.txt habit)."),
        option("--user", envvar="TPUQ_POD_USER", help="SSH user (default: ssh_config, "
                     "else yours)."),
        option("-i", "--key", envvar="TPUQ_POD_KEY", metavar="FILE",
                     help="SSH private key (default: ~/.ssh/google_compute_engine if present, "
                          "and the usual ~/.ssh/id_* and agent keys)."),
        option("--port", type=click.IntRange(1, 65535), envvar="TPUQ_POD_PORT",
                     help="SSH port (default 22)."),
        option("--connect-timeout", default="10s", show_default=True,
                     envvar="TPUQ_POD_CONNECT_TIMEOUT", help="How long to wait for a worker."),
    ]):
        f = add(f)
    return f


def workers(hosts: str | None, listed_only: bool) -> Pod:
    from tpuq.pod.hosts import HostsError, discover

    try:
        return discover(hosts, context.settings().metadata_url, listed_only)
    except HostsError as e:
        raise UserError(str(e)) from None


def ssh_options(user: str | None, key: str | None, port: int | None,
                connect_timeout: str) -> SshOptions:
    from tpuq.pod.ssh import KeyFileError, SshOptions
    from tpuq.spec import parse_duration

    opts = SshOptions(user=user, key=key, port=port,
                      connect_timeout_s=parse_duration(connect_timeout))
    try:
        opts.key_files()
    except KeyFileError as e:
        raise UserError(str(e)) from None
    return opts


def note(pod: Pod) -> None:
    if pod.note:
        click.echo(f"tpuq: {pod.note}", err=True)


@click.group()
def pod() -> None:
    """A TPU pod slice's plumbing, from host 0: run a command everywhere, free the TPUs,
    set the pod up as a team deployment.

    \b
    The workers come from --hosts, else the metadata server (TPUQ_METADATA_URL,
    worker-network-endpoints), else ~/podips.txt, else GCE's metadata server:
      tpuq pod hosts                        list them (w0 is host 0)
      tpuq pod run -- python train.py       run on every worker at once
      tpuq pod clean                        free every worker's TPU (safely)
      tpuq pod setup --pip-spec SPEC        install tpuq and its agent on every worker
    """


@pod.command("hosts")
@pod_options
@context.json_option
def hosts_cmd(hosts: str | None, listed_only: bool, user: str | None, key: str | None,
              port: int | None, connect_timeout: str, as_json: bool) -> None:
    """List the pod's workers, in worker order, and where the list came from.

    \b
    Examples:
      tpuq pod hosts
      tpuq pod hosts --hosts ~/podips.txt
      tpuq pod hosts --hosts 10.0.0.2,10.0.0.3 --json
    """
    found = workers(hosts, listed_only)
    if as_json:
        context.echo_json({"source": found.source, "this_worker": found.this_worker,
                           "note": found.note, "workers": [w.as_dict() for w in found.workers]})
        return
    for w in found.workers:
        click.echo(f"{w.name:4} {w.address}")
    click.echo(f"({len(found.workers)} workers from {found.source})")
    note(found)


@pod.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@pod_options
@option("--timeout", envvar="TPUQ_POD_TIMEOUT", metavar="DURATION",
              help="Stop every worker's command after this long (e.g. 10m); exit 124.")
@option("--fail-fast/--no-fail-fast", default=True, show_default=True,
              envvar="TPUQ_POD_FAIL_FAST",
              help="When one worker fails, stop the command on every other worker.")
@option("--grace", default="5s", show_default=True, envvar="TPUQ_POD_GRACE",
              help="Between SIGTERM and SIGKILL when stopping a worker's command.")
@option("--cwd", envvar="TPUQ_POD_CWD", metavar="DIR",
              help="Directory to run in on every worker (default: this one; '~': the home "
                   "directory).")
@context.json_option
def run(command: tuple[str, ...], hosts: str | None, listed_only: bool, user: str | None,
        key: str | None, port: int | None, connect_timeout: str, timeout: str | None,
        fail_fast: bool, grace: str, cwd: str | None, as_json: bool) -> None:
    """Run COMMAND on every worker at once, as podrun does.

    Each line of output is prefixed with its worker ([w0] is host 0), and each worker's
    exit status is listed at the end. COMMAND is run by the worker's shell, its words
    joined by spaces as ssh does: quote pipes and `&&` as one word. It runs in its own
    session; stopping it (fail-fast, --timeout, Ctrl-C) sends SIGTERM to all its
    processes through a second connection, then SIGKILL after --grace.

    \b
    Examples:
      tpuq pod run -- python3 train.py --steps 1000
      tpuq pod run --timeout 10m -- 'pip install -U "jax[tpu]" && python3 -c "import jax"'
      tpuq pod run --no-fail-fast --hosts ~/podips.txt -- nvidia-smi || true
      tpuq pod run --json -- hostname > status.json

    \b
    Exit status: 0 when every worker exited 0; else the status of the lowest-numbered
    worker that failed by itself; 124 after --timeout, 130 after Ctrl-C, 255 when a
    worker cannot be reached (with --fail-fast nothing is started then) or its
    connection was lost. With --json the summary goes to stdout and the workers'
    output to stderr.
    """
    from tpuq.pod.run import UNREACHABLE, RunOptions, exit_status, run_on_pod
    from tpuq.spec import parse_duration

    found = workers(hosts, listed_only)
    opts = RunOptions(ssh=ssh_options(user, key, port, connect_timeout), cwd=run_dir(cwd),
                      timeout_s=parse_duration(timeout) if timeout else None,
                      fail_fast=fail_fast, grace_s=parse_duration(grace))
    note(found)
    stop_on_hangup()
    out = sys.stderr if as_json else sys.stdout
    outcomes = run_on_pod(list(found.workers), " ".join(command), opts, out, sys.stderr)
    if as_json:
        context.echo_json([o.as_dict() for o in outcomes])
    else:
        for o in outcomes:
            code = "" if o.exit_code is None else f"exit {o.exit_code}"
            left = f"; {o.left} processes would not die" if o.left else ""
            click.echo(f"{o.worker.name:4} {o.worker.address:24} {o.state:11} {code:9} "
                       f"{o.seconds:7.1f}s  {o.error}{left}".rstrip())
    unreachable = [o.error for o in outcomes if o.state == UNREACHABLE]
    if unreachable:
        click.echo(f"tpuq: error: {unreachable[0]}"
                   + (" (nothing was started)" if fail_fast else ""), err=True)
    sys.exit(exit_status(outcomes))


def stop_on_hangup() -> None:
    """SIGTERM and a closed terminal (SIGHUP) stop the workers' commands as Ctrl-C does:
    the command lives and dies with `tpuq pod run`. A signal this process was started
    ignoring (`nohup`) stays ignored."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, signal.default_int_handler)


def run_dir(cwd: str | None) -> str | None:
    if cwd == "~":
        return None
    return cwd or os.getcwd()


@pod.command()
@pod_options
@option("--local", is_flag=True, envvar="TPUQ_POD_CLEAN_LOCAL",
              help="Clean this machine only (what each worker runs).")
@option("--sudo/--no-sudo", default=True, show_default=True, envvar="TPUQ_POD_SUDO",
              help="Run the cleaner as root on a worker whose SSH user is not root "
                   "(`sudo -n`): only root sees every process's open files.")
@option("--remote-tpuq", envvar="TPUQ_POD_REMOTE_TPUQ", metavar="PATH", default="",
              help="tpuq on the workers (default: `tpuq` on their PATH, else "
                   "/opt/tpuq/venv/bin/tpuq).")
@option("--agent-env", envvar="TPUQ_POD_AGENT_ENV", default="/etc/tpuq/agent.env",
              show_default=True, help="With --local: the agent's env file, read for the "
                                      "settings the environment does not give.")
@context.json_option
def clean(hosts: str | None, listed_only: bool, user: str | None, key: str | None,
          port: int | None, connect_timeout: str, local: bool, sudo: bool, remote_tpuq: str,
          agent_env: str, as_json: bool) -> None:
    """Free the TPU on every worker, safely.

    Each worker's tpuq agent, where one runs, kills the orphans of tpuq's attempts;
    every other process holding /dev/accel* or /dev/vfio/* is named (pid, user,
    command), never killed. A stale libtpu lock is removed only when nobody holds the
    devices, and libtpu's log directory is trimmed. (podrun's `rm -rf
    /tmp/libtpu_lockfile` under a live holder lets two processes share a TPU.)

    \b
    Examples:
      tpuq pod clean
      tpuq pod clean --hosts ~/podips.txt --json
      sudo tpuq pod clean --local          this machine only

    Exit status: 0 when every worker's TPU is free, 5 when a process still holds one,
    1 when a worker could not be asked.
    """
    if local:
        clean_local(agent_env, as_json)
        return
    from tpuq.pod.clean import clean_pod

    found = workers(hosts, listed_only)
    note(found)
    results = clean_pod(list(found.workers), ssh_options(user, key, port, connect_timeout),
                        remote_tpuq, sudo)
    if as_json:
        context.echo_json([r.as_dict() for r in results])
    for r in results:
        if not as_json:
            click.echo(f"{r.worker.name:4} {r.worker.address:24} "
                       + (f"error: {r.error}" if r.error else f"({r.via}) {said(r.report)}"))
    if any(r.error for r in results):
        sys.exit(1)
    if not all(r.report.free for r in results):
        sys.exit(EXIT_HELD)


def clean_local(agent_env: str, as_json: bool) -> None:
    from tpuq.agent.tpu.cleanup import CleanReport
    from tpuq.pod.clean import CleanError, clean_here, local_settings

    try:
        result = clean_here(local_settings(agent_env))
    except CleanError as e:
        raise Unavailable(str(e)) from None
    report = CleanReport.from_dict(result["report"])
    if as_json:
        context.echo_json(result)
    else:
        click.echo(f"{result['host']} ({result['via']}) {said(report)}")
    if not report.free:
        sys.exit(EXIT_HELD)


def said(report: Any) -> str:
    """A CleanReport in one line."""
    parts = [f"killed tpuq orphan pid {k['pid']}: {k['command']}" for k in report.killed]
    parts += [f"{j} runs" for j in report.jobs]
    parts += [f"TPU held by pid {h['pid']} ({h['user']}, {h['what']}): {h['command']}"
              for h in report.holders]
    if report.free:
        parts.append("TPU free")
        parts += [f"removed stale {path}" for path in report.removed]
    else:
        parts.append("libtpu lock left alone")
    if report.freed_bytes:
        parts.append(f"trimmed {report.freed_bytes} bytes of libtpu logs")
    if not report.complete:
        parts.append("(not root: other users' processes unseen)")
    return "; ".join(parts)


@pod.command()
@pod_options
@option("--pip-spec", envvar="TPUQ_POD_PIP_SPEC", required=True,
              help="What pip installs on every worker: a version, a wheel path or URL, or "
                   "'tpuq @ git+https://...@TAG'.")
@option("--database-url", envvar="TPUQ_POD_DATABASE_URL", default="",
              help="PostgreSQL for the queue (default: one set up on host 0).")
@option("--broker-url", envvar="TPUQ_POD_BROKER_URL", default="",
              help="Redis for the doorbells (default: one set up on host 0).")
@option("--host-prefix", envvar="TPUQ_POD_HOST_PREFIX", default="",
              help="Name the hosts PREFIX-w0, PREFIX-w1... (default: <TPU node>-w<worker> "
                   "from each worker's metadata, else its instance name).")
@option("--services-address", envvar="TPUQ_POD_SERVICES_ADDRESS", default="",
              help="Where the workers reach host 0's Redis and PostgreSQL (default: host 0's "
                   "address).")
@option("--db-name", envvar="TPUQ_POD_DB_NAME", default="tpuq", show_default=True,
              help="Database and role made on host 0.")
@option("--sudo/--no-sudo", default=True, show_default=True, envvar="TPUQ_POD_SUDO",
              help="Become root with `sudo -n` where the SSH user is not root.")
@context.json_option
def setup(hosts: str | None, listed_only: bool, user: str | None, key: str | None,
          port: int | None, connect_timeout: str, pip_spec: str, database_url: str,
          broker_url: str, host_prefix: str, services_address: str, db_name: str, sudo: bool,
          as_json: bool) -> None:
    """Make the pod a team deployment: one command, safe to run again.

    On host 0: Redis and PostgreSQL (unless --database-url and --broker-url name
    others). On every worker: the deployment kit's startup script (tpuq in
    /opt/tpuq/venv, /etc/tpuq/agent.env, the tpuq-agent systemd unit, started). Then
    `tpuq db upgrade` once, on host 0. Each worker says what changed; a second run
    says "nothing to change".

    \b
    Examples:
      tpuq pod setup --pip-spec 'tpuq @ git+https://github.com/ORG/tpuq@v0.1.0'
      tpuq pod setup --pip-spec tpuq==0.1.0 --database-url postgresql://... \\
                     --broker-url redis://10.0.0.2:6379/0
    """
    from tpuq.pod.provision import SetupError, SetupOptions, setup_pod
    from tpuq.pod.ssh import SshError

    found = workers(hosts, listed_only)
    note(found)
    opts = SetupOptions(pip_spec=pip_spec, database_url=database_url, broker_url=broker_url,
                        host_prefix=host_prefix, services_addr=services_address,
                        db_name=db_name, sudo=sudo)
    try:
        steps = setup_pod(list(found.workers), ssh_options(user, key, port, connect_timeout),
                          opts, sys.stderr)
    except (SetupError, SshError) as e:
        raise Unavailable(str(e)) from None
    if as_json:
        context.echo_json([s.as_dict() for s in steps])
    else:
        for s in steps:
            what = (f"error: {s.error}" if s.error else
                    "changed: " + "; ".join(s.changes) if s.changes else "nothing to change")
            detail = f"  ({s.detail})" if s.detail and not s.error else ""
            click.echo(f"{s.worker.name:4} {s.step:9} {what}{detail}")
    if any(s.error for s in steps):
        sys.exit(1)


COMMANDS = [pod]
