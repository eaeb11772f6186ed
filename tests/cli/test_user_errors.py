"""A user mistake: one line on stderr, non-zero exit, nothing written. Never a traceback."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("args, message", [
    (["missing.py"], "script not found: missing.py"),
    (["--bogus", "train.py"], "no such option: --bogus (see `tpuq submit --help`)"),
    (["--chip", "1", "train.py"], "no such option: --chip (did you mean --chips?)"),
    (["--max-retry=2", "train.py"], "no such option: --max-retry=2 (did you mean "
                                    "--max-retries?)"),
    (["--chips", "0", "--", "/bin/true"], "--chips must be at least 1"),
    (["--chips", "three", "--", "/bin/true"], "'three' is not a valid integer"),
    (["--env", "1BAD=x", "--", "/bin/true"], "bad --env '1BAD=x'"),
    (["--env", "=x", "--", "/bin/true"], "bad --env '=x'"),
    (["--env", "TPUQ_SURELY_UNSET_VAR", "--", "/bin/true"], "not set in this shell"),
    (["--", "no-such-command-xyz"], "command not found: no-such-command-xyz"),
    (["--signal", "SIGNOPE", "--", "/bin/true"], "unknown or uncatchable signal"),
    (["--signal", "KILL", "--", "/bin/true"], "unknown or uncatchable signal"),
    (["--grace", "soon", "--", "/bin/true"], "cannot read duration 'soon'"),
    ([], "Missing argument"),
])
def test_submit_mistakes_are_one_line_and_write_nothing(stack, args, message):
    r = stack.tpuq("submit", *args, check=False)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert not (stack.home / "tpuq.db").exists(), "nothing may be written for a mistake"


def test_unknown_job_is_a_clear_error(stack):
    for command in ("show", "logs", "cancel", "hold"):
        r = stack.tpuq(command, "42", check=False)
        assert (r.returncode, r.stderr) == (3, "tpuq: error: job 42 does not exist\n"), command
    r = stack.tpuq("logs", "99999999999999999999", check=False)
    assert r.returncode == 2 and "is not a job id (they run from 1 to" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_config_value_names_its_source(stack):
    r = stack.tpuq("status", check=False, TPUQ_LEASE_S="long")
    assert r.returncode == 2
    assert "TPUQ_LEASE_S: lease_s must be a number" in r.stderr
    (stack.home).mkdir(parents=True, exist_ok=True)
    (stack.home / "config.toml").write_text("no_such_setting = 1\n")
    r = stack.tpuq("status", check=False)
    assert r.returncode == 2 and "unknown setting 'no_such_setting'" in r.stderr


def test_unreachable_database_is_one_line(stack):
    r = stack.tpuq("status", check=False,
                   TPUQ_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none")
    assert r.returncode == 1
    assert r.stderr.startswith("tpuq: error: ") and "Traceback" not in r.stderr


def test_help_teaches(stack):
    out = stack.tpuq("submit", "--help").stdout
    for word in ("tpuq submit train.py --lr 3e-4", "--chips", "--grace", "--max-retries", "--json"):
        assert word in out
    top = stack.tpuq("--help").stdout
    for cmd in ("submit", "status", "logs", "cancel", "resubmit", "agent", "show"):
        assert f"  {cmd}" in top


def test_every_option_can_come_from_the_environment(stack):
    # explicit names for the common ones (README table), TPUQ_<COMMAND>_<OPTION> for the rest
    r = stack.tpuq("resubmit", "--failed", check=False, TPUQ_RESUBMIT_SINCE="bogus")
    assert r.returncode == 2 and "cannot read duration 'bogus'" in r.stderr
    r = stack.tpuq("submit", "--", "/bin/true", check=False, TPUQ_GRACE="later")
    assert r.returncode == 2 and "cannot read duration 'later'" in r.stderr
    r = stack.tpuq("submit", "-q", "--", "/bin/true", TPUQ_SUBMIT_HOLD="1")
    assert stack.job(int(r.stdout)).state == "held"


def test_an_agent_that_takes_a_submit_and_dies_unanswered_gets_no_second_copy(stack, tmp_path):
    """The agent may have committed the job before it died: the CLI must not queue it
    again by the direct path, and says how to check."""
    import socket
    import threading

    path = str(tmp_path / "agent.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    got = []

    def take_and_die() -> None:
        conn, _ = server.accept()
        with conn:
            got.append(conn.makefile("rb").read())  # the whole request, then no answer

    t = threading.Thread(target=take_and_die, daemon=True)
    t.start()
    try:
        r = stack.tpuq("submit", "--", "/bin/true", check=False, TPUQ_AGENT_SOCKET=path)
    finally:
        t.join(10)
        server.close()
    assert got and b'"op": "submit"' in got[0], "the request reached the agent"
    assert r.returncode == 1, r.stderr
    assert "closed the connection without answering" in r.stderr
    assert "tpuq status --mine" in r.stderr and "Traceback" not in r.stderr
    assert stack.tpuq("status", "--json").stdout.strip() == "[]", "no second copy queued"


@pytest.mark.parametrize("args, message", [
    (["--name", "n" * 201], "--name is 201 characters long; at most 200"),
    (["--priority", "10000000"], "--priority must be between -1000000 and 1000000"),
    (["--team", "a b"], "--team 'a b': letters, digits"),
    (["--grace", "9999999"], "--grace must be at most 604800 seconds"),
])
def test_values_the_database_cannot_hold_are_one_line(stack, args, message):
    r = stack.tpuq("submit", *args, "--", "/bin/true", check=False)
    assert (r.returncode, r.stdout) == (2, "") and message in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1


@pytest.mark.parametrize("env, message", [
    ({"TPUQ_LEASE_S": "-5"}, "TPUQ_LEASE_S must be positive, got -5"),
    ({"TPUQ_HEARTBEAT_S": "30", "TPUQ_LEASE_S": "30"}, "must be shorter than TPUQ_LEASE_S"),
    ({"TPUQ_POLL_S": "nan"}, "TPUQ_POLL_S: poll_s must be a number, got 'nan'"),
])
def test_settings_that_cannot_work_are_one_line(stack, env, message):
    r = stack.tpuq("status", check=False, **env)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.splitlines()) == 1


@pytest.mark.embedded_only
def test_a_broken_config_file_or_database_is_one_line(stack):
    stack.home.mkdir(parents=True, exist_ok=True)
    (stack.home / "config.toml").write_bytes(b"team = \"\xff\xfe\"\n")
    r = stack.tpuq("status", check=False)
    assert r.returncode == 2 and "it is not UTF-8 text" in r.stderr
    (stack.home / "config.toml").unlink()
    (stack.home / "tpuq.db").write_bytes(b"this is not a database" * 100)
    r = stack.tpuq("status", check=False)
    assert r.returncode == 1 and r.stderr.startswith("tpuq: error: ")
    assert "not a database" in r.stderr and len(r.stderr.splitlines()) == 1


def test_help_names_each_options_environment_variable(stack):
    out = " ".join(stack.tpuq("submit", "--help").stdout.split())
    assert "[env var: TPUQ_CHIPS]" in out and "[env var: TPUQ_GRACE]" in out
    assert "env var: TPUQ_SUBMIT_HOLD" in out, "options without their own name the automatic one"
    assert "[env var: TPUQ_STATUS_FORMAT" in " ".join(stack.tpuq("status", "--help").stdout.split())
