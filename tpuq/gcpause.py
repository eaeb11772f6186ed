"""Python's cyclic garbage collector and what a process loads (tpuq/cli/entry.py says
why it matters to the `tpuq` command), and a Ctrl-C held while heavy modules load.

Loading modules allocates tens of thousands of objects that live as long as the process
and leaves next to no garbage. Turning the collector off only defers the work: the
first collection after it comes back on scans everything allocated meanwhile. So the
`tpuq` executable loads with the collector off and then freezes what it loaded
(`gc.freeze`: no collection scans those objects again) before turning it back on. In
any other process (a notebook using `tpuq.client`, the tests) nothing is frozen: the
collector is only paused, and set back as it was.

A long-running `tpuq` process (the agent) also collects its young objects less often
(`serving`): each scheduling pass holds thousands of short-lived tuples at once (the
queued jobs' rows), so with Python's default threshold of 700 allocations the collector
ran about twice per job, each time scanning every young object (with 2,000 jobs queued,
the agent's CPU per job is 5 % lower without that: bench/README.md). At 10,000 it ran
three times in a 2,000-job run; cyclic garbage still goes, at most 10,000 objects later.
"""

from __future__ import annotations

import gc

_executable = False  # this process is the `tpuq` command (cli/entry.py)
SERVING_THRESHOLD = 10_000  # young objects between collections in a long-running command


def start_executable() -> None:
    """The `tpuq` command starts: the collector off until its command is loaded."""
    global _executable
    _executable = True
    gc.disable()


def loaded() -> None:
    """The command's modules are loaded: in the `tpuq` command they are frozen; the
    collector runs from here on, as in any process."""
    if _executable:
        gc.freeze()
    gc.enable()


class paused:  # noqa: N801 - a context manager used as a function
    """The collector off while the block loads heavy modules; what it loaded frozen, in
    the `tpuq` command; then the collector as it was before.

    A Ctrl-C meanwhile is held until the block ends, then raised (unless the block
    raised something else). A module interrupted halfway stays broken for the process
    (importing it again fails), so what a command does on Ctrl-C could not load it:
    `tpuq submit --wait --cancel-on-interrupt`, with no agent, interrupted while its
    first poll loaded SQLAlchemy, could not cancel the job it waited on. Only where
    Python's own handler is in place, in the main thread. (A class, not
    @contextmanager: a plain submit does not load contextlib.)"""

    def __enter__(self) -> None:
        self.was_on = gc.isenabled()
        gc.disable()
        self.came: list[int] | None = _hold_interrupts()

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        try:
            if _executable:
                gc.freeze()
            if self.was_on:
                gc.enable()
        finally:
            if self.came is not None:
                import signal

                signal.signal(signal.SIGINT, signal.default_int_handler)
        if self.came and kind is None:
            raise KeyboardInterrupt


def _hold_interrupts() -> list[int] | None:
    """Where Python's default SIGINT handler is in place in the main thread, one that
    notes each Ctrl-C instead: the list it notes them in (None: nothing was changed)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return None
    came: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: came.append(signum))
    return came


def serving() -> None:
    """The `tpuq` command is up for a long run (the agent, after its start): what it has
    loaded and built is frozen, and young objects are collected every
    SERVING_THRESHOLD allocations. Elsewhere (a notebook, the tests) nothing changes."""
    if not _executable:
        return
    gc.freeze()
    gc.set_threshold(SERVING_THRESHOLD, *gc.get_threshold()[1:])
