"""`tpuq submit`'s reader without Click (tpuq/cli/quick.py) reads a line exactly as Click
does or leaves it to Click: over generated command lines and environments, whatever it
reads equals what Click passes to the command; the common lines it does read; and a
submit it runs queues the same job, says the same thing, and loads no Click."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import click
import pytest

from tpuq.cli import quick
from tpuq.cli.main import cli
from tpuq.cli.submit import submit as click_submit
from tpuq.cli.submit import with_directives

KINDS = {quick.TEXT: click.STRING, quick.INT: click.INT}


def test_every_option_is_read_as_click_declares_it_or_left_to_click() -> None:
    options = [p for p in click_submit.params if isinstance(p, click.Option)]
    read = [p for p in options if p.name in {row[1] for row in quick.OPTIONS}]
    assert [row[1] for row in quick.OPTIONS] == [p.name for p in read], "Click's order"
    for (flags, name, kind, var), p in zip(quick.OPTIONS, read):
        assert sorted(flags) == sorted(p.opts) and not p.secondary_opts, name
        assert var == p.envvar, name
        assert (kind == quick.FLAG) == p.is_flag and (kind == quick.MANY) == p.multiple, name
        if kind in KINDS:
            assert p.type == KINDS[kind], name
    left = {p.name for p in options} - {p.name for p in read}
    assert left == {"args_file", "wait_end", "cancel_on_interrupt"}
    assert left <= set(quick.DEFAULTS) and all(
        flag not in quick._BY_FLAG for p in options if p.name in left for flag in p.opts)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TPUQ_")}
    with mock.patch.dict(os.environ, clean, clear=True):
        assert quick.read(["--", "true"], os.environ) == clicks(["--", "true"]), "defaults"


def test_what_the_tpuq_group_reads_from_the_environment_is_left_to_click() -> None:
    """`tpuq --version` and `--help` read TPUQ_<NAME>, shell completion _TPUQ_COMPLETE,
    before any command: a line in such an environment is Click's."""
    ctx = cli.make_context("tpuq", ["submit"], auto_envvar_prefix="TPUQ")
    names = {f"TPUQ_{p.name.upper()}" for p in cli.get_params(ctx) if p.name}
    assert names <= set(quick.GROUP_VARIABLES)
    assert "_TPUQ_COMPLETE" in quick.GROUP_VARIABLES  # Click: _{PROG_NAME}_COMPLETE
    for name in quick.GROUP_VARIABLES:
        assert quick.read(["--", "true"], {name: "1"}) is None, name


def clicks(args: list[str]) -> tuple[dict[str, Any], dict[str, str]] | None:
    """What Click passes to `submit` for this line in this process's environment (None:
    Click refuses it, or shows help)."""
    try:
        parent = cli.make_context("tpuq", ["submit"], auto_envvar_prefix="TPUQ")
        ctx = click_submit.make_context("submit", list(args), parent=parent)
    except (click.ClickException, click.exceptions.Exit):
        return None
    with ctx:
        return with_directives(ctx, dict(ctx.params))


VALUED = [row[0][-1] for row in quick.OPTIONS if row[2] != quick.FLAG]
FLAGS = ["-q", "--quiet", "--json", "--hold", "--no-requeue", "--no-tcmalloc"]
ODD = ["--wait", "--args-file", "--cancel-on-interrupt", "-h", "--help", "--chip", "-x",
       "-qx", "--hold=1", "-", "--name=", "--chips=2", "--env=A=1", "--after=3,4"]
VALUES = ["3", "-5", " 7", "1_0", "x", "", "--", "--help", "a=b", "run.py", "0-3%2", "22:00"]
COMMANDS = [["--", "/bin/true"], ["/bin/true", "--name", "x"], ["run.py", "--lr", "3"],
            ["--", "-x"], [], ["--", "bash", "run.sh"], ["run.py"]]
ENV = {"TPUQ_CHIPS": ["2", "x", ""], "TPUQ_JOB_NAME": ["from-env"], "TPUQ_NOTIFY_TO": ["a b"],
       "TPUQ_JSON": ["1"], "TPUQ_SUBMIT_HOLD": ["1"], "TPUQ_SUBMIT_NAME": ["n"],
       "TPUQ_CANCEL_ON_INTERRUPT": ["1"], "TPUQ_PRIORITY": ["-2", "+3"],
       "TPUQ_EXPORT": ["NONE"], "TPUQ_GRACE": ["5s"], "TPUQ_SUBMIT_ENV_ITEMS": ["A=1"],
       "TPUQ_VERSION": ["1", "0.1.0"]}


def _line(rng: random.Random) -> list[str]:
    words: list[str] = []
    for _ in range(rng.randrange(5)):
        pick = rng.random()
        if pick < 0.55:
            words += [rng.choice(VALUED), rng.choice(VALUES)]
        elif pick < 0.85:
            words.append(rng.choice(FLAGS))
        else:
            words.append(rng.choice(ODD))
    return words + rng.choice(COMMANDS)


def _environ(rng: random.Random) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("TPUQ_")}
    chosen = rng.sample(sorted(ENV), rng.randrange(3))
    return {**keep, **{k: rng.choice(ENV[k]) for k in chosen}}


def test_whatever_it_reads_click_reads_the_same(tmp_path: Path) -> None:
    (tmp_path / "run.py").write_text("print('no directives here')\n")
    (tmp_path / "run.sh").write_text("#!/bin/sh\ntrue\n")
    os.chdir(tmp_path)
    rng = random.Random(20261127)
    read = declined = 0
    for _ in range(3000):
        args, environ = _line(rng), _environ(rng)
        with mock.patch.dict(os.environ, environ, clear=True):
            mine = quick.read(args, os.environ)
            theirs = clicks(args)
        if mine is None:
            declined += 1
            continue
        read += 1
        assert theirs is not None, f"Click refuses {args} in {environ}"
        assert mine[0] == theirs[0], args
        assert list(mine[1].items()) == list(theirs[1].items()), args
    assert read > 600 and declined > 600, (read, declined)


@pytest.mark.parametrize("line", [
    ["train.py", "--lr", "3e-4"],
    ["--chips", "1", "--", "bash", "run.sh", "a"],
    ["--time", "12h", "--max-retries", "2", "train.py"],
    ["--after", "12", "eval.py"],
    ["--begin", "22:00", "--output", "/data/logs/%j.out", "train.py"],
    ["-q", "--array", "0-99%8", "--", "/bin/true"],
    ["--name=sweep", "--env", "LR=1", "--json", "--notify", "end", "--notify-to",
     "json://localhost/x", "--priority", "-3", "--hold", "--", "/bin/true"],
])
def test_the_usual_lines_are_read_without_click(line: list[str]) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TPUQ_")}
    assert quick.read(line, environ) is not None


# runs `tpuq submit ARGV` as the executable does, then says whether Click was loaded
PROBE = """
import os, sys
leave = os._exit
def noted(code):
    print("click loaded:", "click" in sys.modules, file=sys.stderr, flush=True)
    leave(code)
os._exit = noted
import atexit
atexit.register(lambda: print("click loaded:", "click" in sys.modules, file=sys.stderr))
sys.argv = ["tpuq", *sys.argv[1:]]
from tpuq.cli.entry import main
main()
"""


def _submit(stack: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE, "submit", *args], env=stack.env(),
                          cwd=stack.home, capture_output=True, text=True, timeout=120)


def _stored(stack: Any, job_id: int) -> dict[str, Any]:
    """The job's row, but for what differs between any two jobs (id, times)."""
    job = stack.job(job_id)
    return {c.key: getattr(job, c.key) for c in job.__mapper__.column_attrs
            if c.key not in ("id", "submitted_at", "updated_at", "state_since")}


@pytest.mark.embedded_only
def test_a_plain_submit_queues_the_job_clicks_reader_queues_without_loading_click(
        stack: Any, host: Any) -> None:
    stack.start_agent(host)  # both go through its socket
    line = ["--name", "same", "--chips", "1", "--priority", "-2", "--env", "A=1",
            "--time", "1h", "--grace", "5s", "--hold"]
    fast = _submit(stack, *line, "--", "/bin/true", "x")
    slow = _submit(stack, "--cancel-on-interrupt", *line, "--", "/bin/true", "x")
    assert fast.returncode == slow.returncode == 0, fast.stderr + slow.stderr
    assert "click loaded: False" in fast.stderr and "click loaded: True" in slow.stderr
    first, second = (int(r.stdout.split()[-2]) for r in (fast, slow))
    assert fast.stdout == f"submitted job {first} (held)\n"
    assert slow.stdout == f"submitted job {second} (held)\n"
    assert _stored(stack, first) == _stored(stack, second)
    # a mistake found after the reading (here, then by the agent) is the same line and
    # status either way
    for wrong, said in ((["--grace", "soon"], "tpuq: error: cannot read duration 'soon'"),
                        (["--chips", "3"], "tpuq: error: no host offers 3 chips")):
        bad = [_submit(stack, *pre, *wrong, "--", "/bin/true")
               for pre in ([], ["--cancel-on-interrupt"])]
        assert [b.returncode for b in bad] == [2, 2]
        assert bad[0].stderr.splitlines()[0] == bad[1].stderr.splitlines()[0]
        assert bad[0].stderr.startswith(said), bad[0].stderr
    # a closed stdout: queued all the same; a reader gone from the pipe: queued, and an
    # exit of 1 with nothing said, as Click ends then
    for pre in ([], ["--cancel-on-interrupt"]):
        before = stack.job_count()
        closed = subprocess.run(["/bin/sh", "-c", 'exec "$0" -c "$1" submit ${2:+"$2"} -- '
                                 '/bin/true >&-', sys.executable, PROBE, *pre], env=stack.env(),
                                cwd=stack.home, capture_output=True, text=True, timeout=120)
        assert closed.returncode == 0 and "Traceback" not in closed.stderr, closed.stderr
        r, w = os.pipe()
        os.close(r)
        try:
            gone = subprocess.run([sys.executable, "-c", PROBE, "submit", *pre, "--",
                                   "/bin/true"], env=stack.env(), cwd=stack.home,
                                  stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
        finally:
            os.close(w)
        assert gone.returncode == 1, gone.stderr
        assert gone.stderr.splitlines()[:-1] == [], gone.stderr  # but the probe's line
        assert stack.job_count() == before + 2
