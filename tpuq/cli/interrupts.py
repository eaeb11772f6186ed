"""Ctrl-C while a command waits on jobs it names (`submit --wait`, `wait`, `logs -f`): say
which jobs go on and how to cancel them, or (`--cancel-on-interrupt`) cancel them; exit
130 either way. Click-free: a quick submit (cli/quick.py) uses it without loading Click.
"""

from __future__ import annotations

from contextlib import contextmanager

from tpuq.cli import context

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from typing import NoReturn

INTERRUPTED_EXIT = 130  # as a shell reports a command ended by SIGINT


@contextmanager
def interruptible(ids: Sequence[int], *, cancel: bool, array: int | None = None
                  ) -> Iterator[None]:
    """Ctrl-C inside the block ends the command as `on_interrupt` says."""
    try:
        yield
    except KeyboardInterrupt:
        on_interrupt(ids, cancel=cancel, array=array)


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
