"""The command table of tpuq.cli.main: every command listed, each imported only when run.

`tpuq --help` shows the table's short help without importing a command; these tests keep
that text equal to each command's own, and check what a command costs in imports.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tpuq.cli.main import COMMANDS, cli

CLI_DIR = Path(__file__).resolve().parents[2] / "tpuq" / "cli"


def _loaded(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    r = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\n"
                        "print(json.dumps(sorted(sys.modules)))"],
                       capture_output=True, text=True, check=True)
    return set(json.loads(r.stdout.splitlines()[-1]))


def _exported() -> dict[str, str]:
    """name -> "module:attr" of every command a tpuq/cli module exports in COMMANDS."""
    found: dict[str, str] = {}
    for path in sorted(CLI_DIR.glob("*.py")):
        module = f"tpuq.cli.{path.stem}"
        for node in ast.parse(path.read_text()).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == "COMMANDS" and path.stem != "main"):
                for command in importlib.import_module(module).COMMANDS:
                    found[command.name] = f"{module}:{command.callback.__name__}"
    return found


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_table_names_the_command_and_its_own_short_help(name: str) -> None:
    command = cli.get_command(click.Context(cli), name)
    assert isinstance(command, click.Command)
    assert command.name == name
    assert COMMANDS[name].short_help == command.get_short_help_str(10_000), (
        f"update the short help of {name!r} in tpuq/cli/main.py COMMANDS")


def test_every_exported_command_is_in_the_table() -> None:
    exported = _exported()
    assert exported, "no tpuq/cli module exports COMMANDS"
    missing = sorted(set(exported) - set(COMMANDS))
    assert not missing, f"add {missing} to COMMANDS in tpuq/cli/main.py"
    for name, target in exported.items():
        module = target.partition(":")[0]
        assert COMMANDS[name].target.startswith(module + ":"), (name, COMMANDS[name])


def test_help_lists_every_command_without_importing_one() -> None:
    modules = {e.target.partition(":")[0] for e in COMMANDS.values()}
    loaded = _loaded("from click.testing import CliRunner\n"
                     "from tpuq.cli.main import cli\n"
                     "r = CliRunner().invoke(cli, ['--help'])\n"
                     "assert r.exit_code == 0, r.output\n"
                     "import tpuq.cli.main as m\n"
                     "missing = [n for n in m.COMMANDS if f'  {n} ' not in r.output]\n"
                     "assert not missing, missing")
    assert not modules & loaded, sorted(modules & loaded)


@pytest.mark.parametrize("width", [60, 80, 100, 200])
def test_the_listing_is_the_one_click_makes_from_the_commands(width: int) -> None:
    ctx = click.Context(cli)
    eager = click.Group("tpuq", commands={n: cli.get_command(ctx, n) for n in COMMANDS})
    listings = []
    for group in (cli, eager):
        formatter = click.HelpFormatter(width=width)
        group.format_commands(click.Context(group), formatter)
        listings.append(formatter.getvalue())
    assert listings[0] == listings[1]


def test_submit_imports_neither_rich_nor_sqlalchemy_nor_other_commands() -> None:
    loaded = _loaded("from tpuq.cli.main import cli\n"
                     "import click\n"
                     "cli.get_command(click.Context(cli), 'submit')\n"
                     "import tpuq.client")
    heavy = {m.split(".")[0] for m in loaded} & {"rich", "sqlalchemy", "celery", "kombu",
                                                  "psycopg", "redis"}
    assert not heavy, heavy
    others = {e.target.partition(":")[0] for n, e in COMMANDS.items() if n != "submit"}
    assert not others & loaded, sorted(others & loaded)


def test_a_lazily_loaded_command_shows_its_environment_variables() -> None:
    r = CliRunner().invoke(cli, ["submit", "--help"])
    assert r.exit_code == 0, r.output
    assert "env var: TPUQ_CHIPS" in r.output


def test_an_unknown_command_is_one_line() -> None:
    r = CliRunner().invoke(cli, ["sbumit"])
    assert r.exit_code == 2
    assert "No such command 'sbumit'" in r.output
