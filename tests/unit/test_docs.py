"""The README and the manual in docs/ cannot drift from the code: every setting is in the
reference's table, every link leads somewhere, and every `tpuq` command the docs show
parses with the real CLI (its subcommands and options exist, options that take a value
get one)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from tpuq.settings import ENV

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md"),
                ROOT / "workers" / "README.md"])


def text(page: Path) -> str:
    return page.read_text()


def test_every_setting_is_in_the_reference_table():
    reference = text(ROOT / "docs" / "reference.md")
    rows = dict(re.findall(r"^\| `(TPUQ_[A-Z_]+)` \| `([a-z_]+)` \|", reference, re.M))
    assert rows == {var: name for name, var in ENV.items()}


def test_the_readme_is_a_front_page():
    readme = text(ROOT / "README.md")
    assert len(readme.splitlines()) <= 250
    assert "../shared" not in readme


def test_the_readme_test_command_is_what_ci_runs():
    ci = text(ROOT / ".ci" / "run")
    assert "make test" in text(ROOT / "README.md") and "exec make test" in ci


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_leads_somewhere(page: Path):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text(page)):
        if re.match(r"[a-z]+://", target):
            continue
        assert (page.parent / target).exists(), f"{page.name}: {target}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_points_at_what_users_do_not_have(page: Path):
    assert "../shared" not in text(page) and "DESIGN.md" not in text(page)


def shown_commands(page: str) -> list[str]:
    """`tpuq ...` as shown: lines of fenced blocks, and inline code spans."""
    found: list[str] = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", page, re.M | re.S):
        for line in block.splitlines():
            line = re.sub(r"^\$ ", "", line.strip())
            found += [part.strip() for part in re.split(r"&&|\|\||;", line)
                      if part.strip().startswith("tpuq ")]
    found += re.findall(r"`(tpuq [^`]+)`", page)
    return found


def words(command: str) -> list[str]:
    command = re.sub(r"\s+#\s.*$", "", command)  # a trailing comment
    command = command.split(" | ")[0].split(" > ")[0]
    try:
        return shlex.split(command)[1:]
    except ValueError:  # an inline span cut mid-quote
        return command.split()[1:]


def check(argv: list[str]) -> None:
    """Resolve the subcommands, then let Click's parser read the options (values are not
    checked: docs show placeholders such as ID or HOST)."""
    from tpuq.cli.main import cli

    command: click.Command = cli
    ctx = cli.make_context("tpuq", [], resilient_parsing=True)
    while isinstance(command, click.Group) and argv and not argv[0].startswith("-"):
        name = argv.pop(0)
        sub = command.get_command(ctx, name)
        if sub is None:
            raise AssertionError(f"no command {name!r}")
        command = sub
        ctx = sub.make_context(name, [], parent=ctx, resilient_parsing=True)
    ctx.resilient_parsing = False  # made resiliently (no arguments given): now be strict
    command.make_parser(ctx).parse_args(argv)


CASES = [(page, cmd) for page in PAGES for cmd in shown_commands(text(page))]


@pytest.mark.parametrize("page,command", CASES,
                         ids=[f"{p.name}:{c[:50]}" for p, c in CASES])
def test_every_command_shown_parses(page: Path, command: str):
    argv = [w for w in words(command) if w not in ("[OPTIONS]", "[ARGS]", "...")]
    argv = [w for w in argv if not re.fullmatch(r"\[.*\]|\.\.\.|\w+\.\.\.", w)]
    try:
        try:
            check(list(argv))
        except click.BadOptionUsage:  # prose naming an option: `tpuq submit --signal`
            if not argv or not argv[-1].startswith("--"):
                raise
            check([*argv, "VALUE"])
    except (click.UsageError, AssertionError) as e:
        raise AssertionError(f"{page.relative_to(ROOT)}: `{command}`: {e}") from None


def test_the_manual_index_lists_every_page():
    index = text(ROOT / "docs" / "index.md")
    pages = sorted((ROOT / "docs").rglob("*.md"))
    missing = [str(p.relative_to(ROOT / "docs")) for p in pages
               if p.name != "index.md" and f"({p.relative_to(ROOT / 'docs')})" not in index]
    assert not missing, f"docs/index.md does not link {missing}"
