"""`tpuq`: the command line. Thin commands over the library.

Heavy imports (SQLAlchemy, Celery) happen inside the commands that need them, so
`tpuq submit` through the local agent stays fast.
"""

from __future__ import annotations

import gc
import sys

import click

from tpuq import __version__
from tpuq.cli import (
    admin,
    agent_cmds,
    control,
    fleet,
    history,
    logs,
    pod,
    quota,
    run,
    show,
    status,
    submit,
    wait,
    web,
)
from tpuq.cli.errors import UserError, translate


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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


for command in (*submit.COMMANDS, *status.COMMANDS, *show.COMMANDS, *logs.COMMANDS,
                *control.COMMANDS, *agent_cmds.COMMANDS, *quota.COMMANDS, *admin.COMMANDS,
                *pod.COMMANDS, *wait.COMMANDS, *history.COMMANDS, *fleet.COMMANDS,
                *web.COMMANDS, *run.COMMANDS):
    cli.add_command(command)


def _show_envvars(group: click.Group) -> None:
    """`--help` names each option's environment variable (its own, or TPUQ_<CMD>_<OPT>)."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            _show_envvars(command)
        for param in command.params:
            if isinstance(param, click.Option) and param.name not in ("help",):
                param.show_envvar = True


_show_envvars(cli)


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
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # noqa: BLE001 - known library errors become one line
        err = translate(e)
        if err is None:
            raise
        err.show()
        sys.exit(err.exit_code)
    # without standalone mode, click returns the code of a raised Exit instead of exiting
    if isinstance(rv, int) and rv:
        sys.exit(rv)


__all__ = ["cli", "main", "UserError"]
