"""A Ctrl-C while heavy modules load (gcpause.paused) is raised once they are whole: a
module interrupted halfway could not be loaded again by what the command does on Ctrl-C
(cancelling the jobs it waited on). A SIGINT handler of the process's own (the agent's)
is left to hear it at once. Each case in a fresh interpreter: signals and modules are
the process's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.harness import PYTHONPATH

HELD = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from tpuq import gcpause
try:
    with gcpause.paused():
        os.kill(os.getpid(), signal.SIGINT)  # as a Ctrl-C: delivered before the import
        import heavy
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted after loading:", sys.modules["heavy"].WHOLE)
"""

OWN_HANDLER = """
import os, signal
from tpuq import gcpause
heard = []
signal.signal(signal.SIGINT, lambda *_: heard.append("now"))
with gcpause.paused():
    os.kill(os.getpid(), signal.SIGINT)
    during = list(heard)
print("heard during the block:", during)
"""


def _run(code: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": PYTHONPATH})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_ctrl_c_while_modules_load_is_raised_once_they_are_whole(tmp_path: Path) -> None:
    (tmp_path / "heavy.py").write_text("import json\nWHOLE = True\n")
    assert _run(HELD, str(tmp_path)) == "interrupted after loading: True"


def test_a_handler_of_the_processs_own_hears_it_at_once() -> None:
    assert _run(OWN_HANDLER) == "heard during the block: ['now']"
