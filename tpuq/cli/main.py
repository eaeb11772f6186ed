"""`tpuq`: the command line. Thin commands over the library.

Heavy imports (SQLAlchemy, Celery) happen inside the commands that need them, so
`tpuq submit` through the local agent stays fast.
"""

from __future__ import annotations

import errno
import gc
import sys
from typing import NoReturn, TextIO, cast

import click

from tpuq import __version__
from tpuq.cli.errors import UserError, translate
from tpuq.cli.lazy import Entry, LazyGroup

# Every subcommand: its name, "module:attribute", and the line `tpuq --help` shows for it
# (the command's own short help; tests/cli/test_command_table.py keeps them equal). A
# command's module is imported only when that command runs, so `tpuq submit` never loads
# Rich or SQLAlchemy. A new subcommand is one row here.
COMMANDS: dict[str, Entry] = {
    "submit": Entry("tpuq.cli.submit:submit",
                    "Queue a job: a Python script or, after --, any command."),
    "status": Entry("tpuq.cli.status:status",
                    "Show jobs (open ones and the most recent finished) and hosts: what "
                    "runs, whose, how far, and why the rest waits."),
    "show": Entry("tpuq.cli.show:show",
                  "Show a job: what was asked, each attempt (host, pid, exit, checkpoint), "
                  "and events."),
    "logs": Entry("tpuq.cli.logs:logs",
                  "Print a job's output (stdout and stderr together); a job run more than "
                  "once has each attempt under a header line."),
    "run": Entry("tpuq.cli.run:run",
                 "Run a command interactively on a TPU host: it waits in the queue like any "
                 "job, then runs on this terminal, owning its chips; exits with the "
                 "command's status."),
    "wait": Entry("tpuq.cli.wait:wait",
                  "Wait until the jobs end; exit 0 if all succeeded, else 10 failed, 11 "
                  "cancelled, 12 timeout (the first such job's, in the order given)."),
    "cancel": Entry("tpuq.cli.control:cancel", "Cancel jobs."),
    "preempt": Entry("tpuq.cli.control:preempt",
                     "Preempt running jobs as host maintenance would: signal, grace, "
                     "requeue."),
    "hold": Entry("tpuq.cli.control:hold", "Keep queued jobs from starting until released."),
    "release": Entry("tpuq.cli.control:release", "Let held jobs run again."),
    "update": Entry("tpuq.cli.control:update",
                    "Change a job that has not started (as scontrol update): its priority, "
                    "its time limit, when it may begin, or hold it."),
    "resubmit": Entry("tpuq.cli.control:resubmit",
                      "Queue new jobs from earlier ones' specs, each linked to its original "
                      "and owned by you (someone else's job runs with your shell's "
                      "environment, not theirs)."),
    "drain": Entry("tpuq.cli.control:drain",
                   "Stop giving work to HOST and preempt what runs there (requeued "
                   "elsewhere; admins)."),
    "undrain": Entry("tpuq.cli.control:undrain", "Let HOST take work again (admins)."),
    "host": Entry("tpuq.cli.control:host", "Hosts as the deployment knows them (admins)."),
    "agent": Entry("tpuq.cli.agent_cmds:agent",
                   "Run the host agent in the foreground (one per TPU VM)."),
    "db": Entry("tpuq.cli.agent_cmds:db",
                "Database schema: `tpuq db upgrade` applies the migrations, `tpuq db "
                "downgrade REV` takes them back (docs/upgrading.md)."),
    "config": Entry("tpuq.cli.agent_cmds:config",
                    "Show each setting's value in effect, where it came from (default, the "
                    "system's config file, the user's, an environment variable) and the "
                    "variable that sets it; a path left empty shows the one derived from "
                    "TPUQ_HOME."),
    "quota": Entry("tpuq.cli.quota:quota",
                   "Show each team's chips in use and chip-hours this period against its "
                   "limits."),
    "whoami": Entry("tpuq.cli.admin:whoami",
                    "Who tpuq takes you for (the kernel's or the database's word), and "
                    "whether admin."),
    "admin": Entry("tpuq.cli.admin:admin",
                   "Admins change anyone's jobs, hosts, quotas and admins."),
    "user": Entry("tpuq.cli.admin:user",
                  "Login roles and broker accounts for the team deployment (run with the "
                  "database owner's URL, and the broker URL of an account that may manage "
                  "ACL users)."),
    "pod": Entry("tpuq.cli.pod:pod",
                 "A TPU pod slice's plumbing, from host 0: run a command everywhere, free "
                 "the TPUs, set the pod up as a team deployment."),
    "history": Entry("tpuq.cli.history:history",
                     "Ended jobs over a period, with runtime, chips, and chip-hours charged "
                     "and not charged (preemptions, host errors), like sacct."),
    "usage": Entry("tpuq.cli.history:usage",
                   "Chip-hours per user (or team) over a period: jobs ended, chip-hours "
                   "charged and not charged (from the same records as `tpuq history`)."),
    "fleet": Entry("tpuq.cli.fleet:fleet",
                   "The team's TPU VMs, declared in a file and kept by a controller."),
    "web": Entry("tpuq.cli.web:web", "Serve the dashboard (and /metrics) until Ctrl-C."),
}


@click.group(cls=LazyGroup, table=COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="tpuq")
def cli() -> None:
    """tpuq: a job queue for people sharing Cloud TPU VMs.

    \b
    Start the host agent once per TPU VM:   tpuq agent
    Then, from any shell on the VM:
      tpuq submit train.py --lr 3e-4        queue a Python script (your venv, your cwd)
      tpuq submit -- bash run.sh a b        queue any command
      tpuq status                           the team's jobs and hosts
      tpuq logs 12 -f                       follow a job's output (exits with its outcome)
      tpuq wait 12 && tpuq submit eval.py   chain on success
      tpuq show 12                          spec, attempts and timeline of one job
      tpuq cancel 12                        stop it (signal, grace, then kill)
      tpuq resubmit --failed --since 1d     run failed jobs again
    On a pod slice's host 0:
      tpuq pod run -- python train.py       run on every worker (see `tpuq pod --help`)

    Configuration comes from TPUQ_* environment variables or $TPUQ_HOME/config.toml;
    see `tpuq config`.
    """


AUTO_ENV_PREFIX = "TPUQ"


def main(argv: list[str] | None = None) -> None:
    """The `tpuq` process: run one command, then exit."""
    try:
        _run(argv)
    finally:
        # A CLI process ends right after this: the collector has nothing to free that the
        # exit will not, and with SQLAlchemy and Celery loaded its final passes took
        # ~150 ms of every team command (bench: team, no agent).
        gc.freeze()


def _run(argv: list[str] | None) -> None:
    try:
        # every option without an explicit envvar= still reads TPUQ_<COMMAND>_<OPTION>
        rv = cli.main(args=argv, prog_name="tpuq", standalone_mode=False,
                      auto_envvar_prefix=AUTO_ENV_PREFIX)
    except Exception as e:  # noqa: BLE001 - known errors become one line
        fail(e)
    # without standalone mode, click returns the code of a raised Exit instead of exiting
    if isinstance(rv, int) and rv:
        sys.exit(rv)


def fail(e: BaseException) -> NoReturn:
    """End the command for `e` as the command line ends for it: a mistake, a refusal or a
    known library error is one line and its kind's exit status; Ctrl-C is "aborted"
    (130); a reader gone from the pipe ends it quietly (1); anything else is a bug,
    whose traceback is shown."""
    if isinstance(e, KeyboardInterrupt):  # what Click does with one inside a command
        click.echo(err=True)
        e = click.exceptions.Abort()
    if isinstance(e, click.exceptions.Abort):
        click.echo("aborted", err=True)
        sys.exit(130)
    if isinstance(e, click.ClickException):
        e.show()
        sys.exit(e.exit_code)
    if isinstance(e, click.exceptions.Exit):
        sys.exit(e.exit_code)
    if isinstance(e, OSError) and e.errno == errno.EPIPE:  # as Click: the reader left
        from click.utils import _PacifyFlushWrapper

        sys.stdout = cast(TextIO, _PacifyFlushWrapper(sys.stdout))
        sys.stderr = cast(TextIO, _PacifyFlushWrapper(sys.stderr))
        sys.exit(1)
    err = translate(e)
    if err is None:
        raise e
    err.show()
    sys.exit(err.exit_code)


__all__ = ["cli", "main", "UserError"]
