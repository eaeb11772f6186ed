"""Ctrl-C while a command waits on jobs it names (`submit --wait`, `wait`, `logs -f`): say
which jobs go on and how to cancel them, or (`--cancel-on-interrupt`) cancel them; exit
130 either way. Click-free: a quick submit (cli/quick.py) uses it without loading Click.
"""

from __future__ import annotations

from tpuq.cli import context

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import TracebackType
    from typing import NoReturn

INTERRUPTED_EXIT = 130  # as a shell reports a command ended by SIGINT


class interruptible:  # noqa: N801 - a context manager used as a function
    """Ctrl-C inside the block ends the command as `on_interrupt` says. (A class: a
    plain submit does not load contextlib.)"""

    def __init__(self, ids: Sequence[int], *, cancel: bool, array: int | None = None
                 ) -> None:
        self.ids, self.cancel, self.array = ids, cancel, array

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, _value: BaseException | None,
                 _tb: TracebackType | None) -> None:
        if kind is not None and issubclass(kind, KeyboardInterrupt):
            on_interrupt(self.ids, cancel=self.cancel, array=self.array)


def on_interrupt(ids: Sequence[int], *, cancel: bool, array: int | None = None) -> NoReturn:
    """What an interrupted wait tells (or does): the jobs keep running unless `cancel`."""
    what = f"array {array}" if array is not None else \
        ("job " if len(ids) == 1 else "jobs ") + " ".join(map(str, ids))
    how = f"--array {array}" if array is not None else " ".join(map(str, ids))
    if not cancel:
        context.echo(f"tpuq: interrupted; {what} goes on (stopped waiting only): "
                     f"`tpuq cancel {how}` cancels it", err=True)
        raise SystemExit(INTERRUPTED_EXIT)
    from tpuq.protocol import Action, Control, Results

    req = Control(action=Action.CANCEL, ids=[] if array is not None else list(ids),
                  arrays=[array] if array is not None else [])
    for r in context.ask(req, Results).results:
        said = r["message"] if r["ok"] else f"not cancelled: {r['message']}"
        context.echo(f"tpuq: interrupted; job {r['id']} {said}", err=True)
    raise SystemExit(INTERRUPTED_EXIT)
