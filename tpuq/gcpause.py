"""Python's cyclic garbage collector and what a process loads (tpuq/cli/entry.py says
why it matters to the `tpuq` command).

Loading modules allocates tens of thousands of objects that live as long as the process
and leaves next to no garbage. Turning the collector off only defers the work: the
first collection after it comes back on scans everything allocated meanwhile. So the
`tpuq` executable loads with the collector off and then freezes what it loaded
(`gc.freeze`: no collection scans those objects again) before turning it back on. In
any other process (a notebook using `tpuq.client`, the tests) nothing is frozen: the
collector is only paused, and set back as it was.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_executable = False  # this process is the `tpuq` command (cli/entry.py)


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


@contextmanager
def paused() -> Iterator[None]:
    """The collector off while the block loads heavy modules; what it loaded frozen, in
    the `tpuq` command; then the collector as it was before."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _executable:
            gc.freeze()
        if was_on:
            gc.enable()
