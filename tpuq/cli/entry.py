"""`tpuq`, the executable (the console script): the command line, loaded with Python's
cyclic garbage collector off, then frozen (tpuq/gcpause.py). A plain `tpuq submit`
line is read without loading Click (cli/quick.py); every other one goes to Click.

With the collector on, every 700 allocations start a collection while modules load:
about 20 collections during a submit's start-up through the agent (7 % of its wall
time), about 190 while a command without an agent loads SQLAlchemy, each scanning what
loaded before it. The collector is on again once the command is loaded
(`LazyGroup.resolve_command`), so a long-running command (the agent, the dashboard,
`logs -f`) collects its own garbage as any process does.
"""

from __future__ import annotations

import os
import sys

from tpuq import gcpause


def main() -> None:
    gcpause.start_executable()
    if sys.argv[1:2] == ["submit"]:
        from tpuq.cli import quick

        if quick.submit(sys.argv[2:]):
            # queued, said and flushed: the interpreter's teardown (module by module)
            # would cost a fifth of what the command costs above a bare interpreter
            os._exit(0)
    from tpuq.cli.main import main as run

    run()
