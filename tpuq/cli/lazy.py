"""A Click group whose subcommands are imported only when run.

Each subcommand is a row of a table: its name, where it lives ("module:attribute") and
its short help. `tpuq --help` lists the table without importing a command module;
`tpuq submit` imports tpuq.cli.submit and nothing of `status`, `web` or `fleet`
(Rich, SQLAlchemy). tests/cli/test_command_table.py checks each row's short help
against the command's own.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

import click

from tpuq import gcpause


class Entry(NamedTuple):
    """One subcommand: where it is defined and the line `--help` shows for it."""

    target: str  # "tpuq.cli.submit:submit"
    short_help: str


def shortened(text: str, limit: int) -> str:
    """`text` cut at a word to fit `limit` characters with "..." where cut, as Click cuts a
    docstring for the command list (its helper for that is deprecated)."""
    words = text.split()
    total = 0
    for i, word in enumerate(words):
        total += len(word) + (i > 0)
        if total > limit or (total == limit and i != len(words) - 1):
            break
    else:
        return text
    total += 3
    while i > 0:
        total -= len(words[i]) + 1
        if total <= limit:
            break
        i -= 1
    return " ".join(words[:i]) + "..."


def show_envvars(command: click.Command) -> None:
    """`--help` names each option's environment variable (its own, or TPUQ_<CMD>_<OPT>)."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            show_envvars(sub)
    for param in command.params:
        if isinstance(param, click.Option) and param.name != "help":
            param.show_envvar = True


class LazyGroup(click.Group):
    """A group whose commands come from a table of `Entry`, imported on first use."""

    def __init__(self, *args: Any, table: dict[str, Entry], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.table = table

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        finally:
            # the command's module is loaded: from here on the cyclic collector runs, as
            # in any process (`tpuq` starts with it off: tpuq/cli/entry.py)
            gcpause.loaded()

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.table})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        entry = self.table.get(cmd_name)
        if entry is None:
            return None
        module, _, attr = entry.target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{entry.target} is not a Click command")
        show_envvars(command)
        self.commands[cmd_name] = command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The table's short help for each command, none of them imported."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            if name in self.table:
                text = shortened(self.table[name].short_help, limit)
            else:
                command = self.commands[name]
                if command.hidden:
                    continue
                text = command.get_short_help_str(limit)
            rows.append((name, text))
        with formatter.section("Commands"):
            formatter.write_dl(rows)
