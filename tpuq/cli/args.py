"""Argument types the commands share: what a job id is, and what a list is, once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from tpuq.spec import MAX_ID


class JobIdType(click.ParamType):  # type: ignore[type-arg]  # generic in newer click
    """A job id: a whole number from 1 up (what the database can hold)."""

    name = "ID"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            n = value
        else:
            try:
                n = int(str(value).strip().lstrip("#"))
            except ValueError:
                self.fail(f"{value!r} is not a job id (a whole number, e.g. 12)", param, ctx)
        if not 1 <= n <= MAX_ID:
            self.fail(f"{value} is not a job id (they run from 1 to {MAX_ID})", param, ctx)
        return n


JOB_ID = JobIdType()


class WordsType(click.ParamType):  # type: ignore[type-arg]  # generic in newer click
    """Comma-separated values, each of `item`'s type (or one of `choices`)."""

    def __init__(self, item: click.ParamType | None = None,  # type: ignore[type-arg]
                 choices: Sequence[str] = ()) -> None:
        self.item = item if item is not None else \
            click.Choice(tuple(choices)) if choices else click.STRING
        self.name = f"{self.item.name} list"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> tuple[Any, ...]:
        if isinstance(value, tuple):
            return value
        words = [w.strip() for w in str(value).split(",")]
        if not all(words):
            self.fail(f"{value!r}: an empty item in the list", param, ctx)
        return tuple(self.item.convert(w, param, ctx) for w in words)


F = TypeVar("F", bound=Callable[..., Any])


def _flat(ctx: click.Context, param: click.Parameter, value: Any) -> tuple[Any, ...]:
    return tuple(v for group in value or () for v in group)


def words_option(*decls: str, choices: Sequence[str] = (),
                 item: click.ParamType | None = None,  # type: ignore[type-arg]
                 metavar: str | None = None, **kw: Any) -> Callable[[F], F]:
    """An option that repeats and also takes comma lists (`--state queued,running`):
    the command gets one flat tuple."""
    if metavar is None:
        word = next(d for d in decls if d.startswith("--"))[2:].upper()
        metavar = f"{word}[,{word}]"
    if choices:
        kw["help"] = f"{kw.get('help', '')} {metavar.split('[')[0]}: {', '.join(choices)}."
    return click.option(*decls, multiple=True, type=WordsType(item, choices),
                        callback=_flat, metavar=metavar, **kw)

cancel_on_interrupt_option = click.option(
    "--cancel-on-interrupt", is_flag=True, envvar="TPUQ_CANCEL_ON_INTERRUPT",
    help="Cancel the job(s) when this command is interrupted (Ctrl-C); otherwise they "
         "stay queued or running, and the command says how to cancel them.")
