"""SLURM habits, the pure parts: --begin times, --output names (%j, %a...), the opening of
an output file as its owner, #TPUQ directives and their precedence, dependency refs
(ID, ID_N) and how a reason names an array."""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import time
from pathlib import Path

import pytest

from tpuq import arrays, begin, directives, outputs
from tpuq.cli.submit import submit, with_directives
from tpuq.scheduler.policy import plan
from tpuq.scheduler.views import HostView, JobView
from tpuq.spec import SpecError

# a Wednesday 10:30:00 local time, whatever TZ the test runs in
NOW = dt.datetime(2026, 11, 25, 10, 30).timestamp()


def local(*fields: int) -> float:
    return dt.datetime(*fields).timestamp()  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "expected"), [
    ("22:00", local(2026, 11, 25, 22, 0)),
    ("10:00", local(2026, 11, 26, 10, 0)),  # past today: tomorrow, as SLURM
    ("10:30:01", local(2026, 11, 25, 10, 30, 1)),
    ("+2h", NOW + 7200), ("now+90m", NOW + 5400), ("+1d2h", NOW + 93600), ("now", NOW),
    ("2026-12-01", local(2026, 12, 1)), ("2026-12-01T06:30", local(2026, 12, 1, 6, 30)),
    ("2026-12-01 06:30:15", local(2026, 12, 1, 6, 30, 15)),
    ("2026-12-01T06:30Z", dt.datetime(2026, 12, 1, 6, 30, tzinfo=dt.timezone.utc).timestamp()),
    ("2026-12-01T06:30+02:00",
     dt.datetime(2026, 12, 1, 4, 30, tzinfo=dt.timezone.utc).timestamp()),
    ("midnight", local(2026, 11, 26)), ("noon", local(2026, 11, 25, 12)),
    ("tomorrow", local(2026, 11, 26)), ("today", local(2026, 11, 25)),
])
def test_begin_times_read_as_slurm_reads_them(text: str, expected: float) -> None:
    assert begin.parse(text, NOW) == expected


@pytest.mark.parametrize("text", ["", "25:00", "12:61", "+", "+2x", "soon", "2026-13-01",
                                  "x" * 100])
def test_a_begin_time_that_is_not_one_is_one_line(text: str) -> None:
    with pytest.raises(SpecError, match="--begin") as e:
        begin.parse(text, NOW)
    assert "\n" not in str(e.value)


def test_output_names_expand_as_slurm_names_them() -> None:
    t = "/d/%A_%a/%j-%u-%x.%%.out"
    assert outputs.template_error(t) is None
    assert outputs.expand(t, 57, 54, 3, "ann", "sweep/lr") == "/d/54_3/57-ann-sweep_lr.%.out"
    assert outputs.expand("/d/%j_%a_%A", 9, None, None, "ann", None) == "/d/9_0_9"
    for bad, says in [("rel/%j", "absolute"), ("/d/%q", "%q is not one of"),
                      ("/d/x%", "lone %"), ("/d/x%%%", "lone %"), ("/d/", "directory")]:
        assert says in (outputs.template_error(bad) or "")
    assert outputs.template_error("/d/x%%") is None


def test_the_output_file_is_opened_without_following_a_planted_link(tmp_path: Path) -> None:
    me = os.geteuid()
    out = tmp_path / "out.log"
    fd = outputs.open_as(str(out), None)
    os.write(fd, b"one\n")
    os.close(fd)
    fd = outputs.open_as(str(out), me, truncate=False)
    os.write(fd, b"two\n")
    os.close(fd)
    assert out.read_text() == "one\ntwo\n", "a later attempt appends"
    os.close(outputs.open_as(str(out), None, truncate=True))
    assert out.read_text() == "", "the first attempt starts the file anew"

    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "link.log").symlink_to(victim)
    with pytest.raises(outputs.Refused, match="symbolic link"):
        outputs.open_as(str(tmp_path / "link.log"), None)
    assert victim.read_text() == "keep\n"

    # a link in the path: followed only where nobody else could have made or swapped it
    real = tmp_path / "real"
    real.mkdir()
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    mine.chmod(0o755)
    (mine / "to-real").symlink_to(real)
    os.close(outputs.open_as(str(mine / "to-real" / "a.log"), None))
    assert (real / "a.log").exists()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp: anyone may put a link here
    (shared / "to-real").symlink_to(real)
    with pytest.raises(outputs.Refused, match="someone else could have made"):
        outputs.open_as(str(shared / "to-real" / "b.log"), None)
    assert not (real / "b.log").exists()
    with pytest.raises(OSError):
        outputs.open_as(str(tmp_path / "missing" / "c.log"), None)


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming another user needs root")
def test_the_output_file_is_written_as_the_jobs_owner() -> None:
    owner = 65534  # nobody
    with tempfile.TemporaryDirectory(dir="/tmp") as where:  # pytest's are root's alone
        _as_owner(Path(where), owner)


def _as_owner(tmp_path: Path, owner: int) -> None:
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, owner, owner)
    tmp_path.chmod(0o755)
    fd = outputs.open_as(str(home / "job.out"), owner, owner, [])
    os.close(fd)
    assert (home / "job.out").stat().st_uid == owner
    root_only = tmp_path / "root-only"
    root_only.mkdir(mode=0o700)
    with pytest.raises(outputs.Refused, match="Permission denied"):
        outputs.open_as(str(root_only / "job.out"), owner, owner, [])
    theirs = home / "theirs.out"
    theirs.write_text("someone else's\n")  # root's, in the owner's directory, and
    theirs.chmod(0o666)  # writable by anyone: planted there to be read back by its maker
    with pytest.raises(outputs.Refused, match="not the job owner's"):
        outputs.open_as(str(theirs), owner, owner, [])
    assert theirs.read_text() == "someone else's\n"


def test_directives_end_at_the_first_line_of_code() -> None:
    text = ("#!/bin/bash\n# setup\n#TPUQ --chips 1 --time 2h  # two hours\n\n"
            "#TPUQ --name 'a b'\n#TPUQX --no\n# TPUQ --no\necho hi\n#TPUQ --late\n")
    assert directives.parse(text) == [(3, ["--chips", "1", "--time", "2h"]),
                                      (5, ["--name", "a b"])]
    with pytest.raises(SpecError, match="line 1: #TPUQ No closing quotation"):
        directives.parse("#TPUQ --name 'x\n")


def test_the_script_whose_directives_count(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    assert directives.script_of([str(script), "a"]) == str(script)
    assert directives.script_of(["bash", str(script)]) == str(script)
    assert directives.script_of(["echo", str(script)]) is None
    assert directives.script_of(["missing.py"]) is None


def test_the_command_line_and_the_environment_win_over_directives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "train.py"
    script.write_text("#TPUQ --chips 2 --time 2h --name s --after 3 --hold\nprint(1)\n")
    monkeypatch.setenv("TPUQ_PRIORITY", "4")
    monkeypatch.delenv("TPUQ_CHIPS", raising=False)
    ctx = submit.make_context("submit", ["--name", "cli", "--json", str(script)])
    opts, sources = with_directives(ctx, dict(ctx.params))
    assert (opts["chips"], opts["time_limit"], opts["name"], opts["after"], opts["hold"],
            opts["priority"]) == (2, "2h", "cli", ("3",), True, 4)
    assert sources == {"--chips": "#TPUQ", "--time": "#TPUQ", "--after": "#TPUQ",
                       "--hold": "#TPUQ", "--name": "command line",
                       "--priority": "environment"}
    monkeypatch.setenv("TPUQ_CHIPS", "1")
    ctx = submit.make_context("submit", [str(script)])
    assert with_directives(ctx, dict(ctx.params))[0]["chips"] == 1


def test_dependency_refs() -> None:
    assert arrays.parse_ref("12") == (12, None)
    assert arrays.parse_ref(" 54_2 ") == (54, 2)
    for bad in ("0", "x", "54_", "_2", "54_2_1", "1" * 30, "-3"):
        with pytest.raises(SpecError, match="is not a job id"):
            arrays.parse_ref(bad)


def test_a_reason_names_the_array_or_the_task_it_waits_for() -> None:
    hosts = [HostView("h", "v4-8", (0, 1, 2, 3), frozenset({0, 1, 2, 3}))]
    jobs = [JobView(id=i, team="a", user="u", priority=0, submitted_at=NOW, chips=1,
                    depends_on=deps) for i, deps in
            [(100, (54, 55, 56)), (101, (55, 56, 12)), (102, (56,)), (103, (12, 13))]]
    tasks = {54: (54, 0), 55: (54, 1), 56: (54, 2)}
    p = plan(jobs, hosts, {}, NOW, tasks=tasks)
    assert dict(p.waiting) == {100: "waiting for array 54 (tasks 0-2)",
                               101: "waiting for job 12, array 54 (tasks 1-2)",
                               102: "waiting for task 54_2", 103: "waiting for jobs 12, 13"}


def test_a_job_before_its_begin_time_waits_and_says_until_when() -> None:
    hosts = [HostView("h", "v4-8", (0, 1, 2, 3), frozenset({0, 1, 2, 3}))]
    now = time.time()
    at = now + 3600
    j = JobView(id=1, team="a", user="u", priority=0, submitted_at=now, chips=1,
                not_before=at, begin_at=at)
    p = plan([j], hosts, {}, now)
    assert not p.assignments
    assert p.waiting[1] == f"begins at {time.strftime('%H:%M', time.localtime(at))} (--begin)"
    assert plan([j], hosts, {}, at + 1).assignments, "its time came: it starts"
