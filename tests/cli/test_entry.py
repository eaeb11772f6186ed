"""The `tpuq` executable loads its modules with Python's cyclic collector off, freezes
them, and runs the command with the collector on (tpuq/cli/entry.py, tpuq/gcpause.py),
so a long-running command collects."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest

from tpuq.gcpause import SERVING_THRESHOLD, paused, serving

# records the collector's state where the command's module loads and where it runs
PROBE = """
import gc, json, sys
import click
import tpuq.cli.lazy as lazy
seen = []
load = lazy.LazyGroup.get_command
def get_command(self, ctx, name):
    seen.append(["loading " + name, gc.isenabled()])
    return load(self, ctx, name)
lazy.LazyGroup.get_command = get_command
invoke = click.Command.invoke
def run(self, ctx):
    if not isinstance(self, click.Group):
        seen.append(["running " + ctx.info_name, gc.isenabled(), gc.get_freeze_count() > 10000])
    return invoke(self, ctx)
click.Command.invoke = run
sys.argv = ["tpuq", "config", "--json"]
from tpuq.cli import entry
try:
    entry.main()
except SystemExit:
    pass
print(json.dumps(seen), file=sys.stderr)
"""


def test_the_executable_loads_with_the_collector_off_and_runs_the_command_with_it_on(
        tmp_path):
    env = {"PATH": "/usr/bin:/bin", "TPUQ_HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                       timeout=60)
    seen = json.loads(r.stderr.strip().splitlines()[-1])
    # what loaded is frozen (tens of thousands of objects no collection scans again)
    assert seen == [["loading config", False], ["running config", True, True]], r.stderr


def test_paused_restores_the_collector_as_it_was_and_freezes_nothing_outside_the_command():
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "a collector that was off stays off"
    finally:
        gc.enable()
    assert gc.get_freeze_count() == frozen, "only the tpuq executable freezes"


# a `tpuq agent` that notes the collector's settings once its start called serving()
AGENT_PROBE = """
import gc, json, os, sys
from tpuq import gcpause
serving = gcpause.serving
def noted():
    serving()
    with open(os.environ["TPUQ_TEST_GC_NOTE"], "w") as f:
        json.dump([list(gc.get_threshold()), gc.get_freeze_count()], f)
gcpause.serving = noted
sys.argv = ["tpuq", *sys.argv[1:]]
from tpuq.cli.entry import main
main()
"""


@pytest.mark.embedded_only
def test_the_agent_freezes_what_its_start_built_and_collects_young_objects_less_often(
        stack, host, tmp_path):
    note = tmp_path / "gc.json"
    stack.start_agent(host, command=[sys.executable, "-c", AGENT_PROBE],
                      TPUQ_TEST_GC_NOTE=str(note))
    threshold, frozen = json.loads(note.read_text())
    assert threshold[0] == SERVING_THRESHOLD and threshold[1:] == list(gc.get_threshold()[1:])
    assert frozen > 10000, "the agent's modules and start are frozen"
    job = stack.submit("--", "true")  # and it serves
    assert stack.wait_state(job, "succeeded").state == "succeeded"


def test_serving_changes_nothing_outside_the_tpuq_command():
    before = gc.get_threshold(), gc.get_freeze_count()
    serving()
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
