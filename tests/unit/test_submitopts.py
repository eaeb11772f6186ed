"""The one mapping from submit options to a job spec (tpuq/submitopts.py): the CLI,
the Python API and resubmit read an option alike."""

from __future__ import annotations

import os
import sys

import pytest

from tpuq.settings import load
from tpuq.spec import JobSpec, SpecError
from tpuq.submitopts import Resubmission, SubmitOptions, ids, resolve, seconds, update_fields

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/home/a", "STEP": "7", "TPU_VISIBLE_CHIPS": "0"}


def cfg(**more: str):  # type: ignore[no-untyped-def]
    return load({"TPUQ_HOME": "/srv/q", "TPUQ_USER": "alice", "TPUQ_TEAM": "vision",
                 "TPUQ_SYSTEM_CONFIG": "/nonexistent/etc.toml", **more})


def spec(opts: SubmitOptions, **more: str) -> JobSpec:
    return opts.spec(["/bin/true"], cfg(**more), environ=ENV, cwd="/work")


def test_defaults_come_from_the_configuration():
    s = spec(SubmitOptions(), TPUQ_DEFAULT_GRACE_S="12", TPUQ_NOTIFY="fail",
             TPUQ_NOTIFY_TO="json://example.org/hook")
    assert (s.owner, s.team, s.grace_s, s.time_limit_s) == ("alice", "vision", 12.0, None)
    assert (s.notify, s.notify_to) == ("fail", "json://example.org/hook")
    assert (s.cwd, s.requeue_on_preempt, s.tcmalloc, s.priority) == ("/work", True, True, 0)
    assert s.env["STEP"] == "7" and "TPU_VISIBLE_CHIPS" in (s.env_dropped or [])


def test_durations_are_text_or_seconds_alike():
    a = spec(SubmitOptions(time_limit="1h30m", grace="45s"))
    b = spec(SubmitOptions(time_limit=5400, grace=45.0))
    assert (a.time_limit_s, a.grace_s) == (b.time_limit_s, b.grace_s) == (5400.0, 45.0)
    for bad in ("soon", "", True, [1]):
        with pytest.raises(SpecError):
            seconds(bad)  # type: ignore[arg-type]


def test_every_option_reaches_its_field():
    s = spec(SubmitOptions(name="n", chips=2, tpu_type="v5e-8", team="nlp", priority=4,
                           env=["EXTRA=1"], export="NONE", stop_signal="INT",
                           max_retries=2, requeue=False, tcmalloc=False, notify="end",
                           notify_to=["json://example.org/x"]))
    assert (s.name, s.chips, s.tpu_type, s.team, s.priority) == ("n", 2, "v5litepod-8", "nlp", 4)
    assert s.env.get("EXTRA") == "1" and "STEP" not in s.env, "--export NONE keeps PATH etc. only"
    assert (s.stop_signal, s.max_retries, s.requeue_on_preempt, s.tcmalloc) == \
        ("SIGINT", 2, False, False)
    assert (s.notify, s.notify_to) == ("end", "json://example.org/x")


def test_a_bad_option_is_a_spec_error():
    with pytest.raises(SpecError, match="--chips must be at least 1"):
        spec(SubmitOptions(chips=0))
    with pytest.raises(SpecError, match="unknown submit option 'chip'"):
        SubmitOptions().merged(chip=1)
    with pytest.raises(SpecError, match="after: job ids"):
        ids(["3"], "after")


def test_the_request_carries_how_the_job_waits():
    class Handle:
        id = 7

    opts = SubmitOptions(hold=True, after=[3, Handle()], after_any=[4])  # type: ignore[list-item]
    req = opts.request(spec(opts), function="abc")
    assert (req.held, req.after, req.after_any, req.function) == (True, [3, 7], [4], "abc")


def test_a_python_call_splits_its_keywords():
    opts, rest = SubmitOptions.pick({"chips": 1, "lr": 0.1, "hold": True})
    assert (opts.chips, opts.hold, rest) == (1, True, {"lr": 0.1})


def test_commands_resolve_as_the_cli_resolves_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    assert resolve(["train.py", "--lr", "1"], sys.executable) == \
        [sys.executable, str(tmp_path / "train.py"), "--lr", "1"]
    assert resolve(["true"], None)[0].endswith("/true")
    for argv, says in ((["nope.py"], "script not found"), (["no-such-tool-x"], "command not found"),
                       (["./missing"], "not an executable file"), ([], "no command")):
        with pytest.raises(SpecError, match=says):
            resolve(argv, None)


def test_a_resubmission_by_another_takes_their_environment():
    original = spec(SubmitOptions(notify="end", notify_to=["json://example.org/a"]))
    how = Resubmission(env={"PATH": "/bin"}, notify=None, notify_to=None)
    mine = how.apply(JobSpec(**original.to_dict()), 12, "alice")
    assert mine.env == original.env and mine.resubmit_of == 12 and mine.notify is None
    theirs = how.apply(JobSpec(**original.to_dict()), 12, "bob")
    assert theirs.env == {"PATH": "/bin"} and theirs.owner == "bob"


def test_update_fields_use_the_same_durations():
    assert update_fields(3, "2h") == (3, 7200.0, None)
    assert update_fields(None, None) == (None, None, None)


def test_update_fields_read_begin_as_submit_does(monkeypatch):
    monkeypatch.setattr("time.time", lambda: 1_000_000.0)
    assert update_fields(None, None, "+2h")[2] == 1_000_000.0 + 7200
    assert update_fields(None, None, "now")[2] == 1_000_000.0
    assert update_fields(None, None, 5.0)[2] == 5.0
    with pytest.raises(SpecError, match="--begin '25:00': not a time of day"):
        update_fields(None, None, "25:00")


def test_the_cli_and_the_python_api_make_the_same_spec(tmp_path, monkeypatch):
    """`tpuq submit --chips 2 --time 2h --name x train.py` and submit_command(...)."""
    from click.testing import CliRunner

    from tpuq.cli import context
    from tpuq.cli.submit import submit

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    sent = []

    def ask(req, expect):  # type: ignore[no-untyped-def]
        sent.append(req)
        raise SystemExit(0)

    monkeypatch.setattr(context, "ask", ask)
    monkeypatch.setattr(context, "settings", lambda: cfg())
    monkeypatch.setattr(os, "environ", dict(ENV))
    CliRunner().invoke(submit, ["--chips", "2", "--time", "2h", "--name", "x",
                                "--python", sys.executable, "train.py"])
    (req,) = sent
    opts = SubmitOptions(chips=2, time_limit="2h", name="x", python=sys.executable)
    from_python = opts.request(opts.spec(resolve(["train.py"], sys.executable), cfg(),
                                         environ=ENV))
    # the CLI also records where each option came from (`show` says it); the rest is equal
    assert req.spec.pop("option_sources") == {"--chips": "command line", "--name":
                                              "command line", "--python": "command line",
                                              "--time": "command line"}
    assert req.spec == from_python.spec
