"""What can never run is refused at submit in one line (exit 2), and nothing is queued;
before any host has registered, a submit is accepted with a warning."""

from __future__ import annotations

import pytest


def refused(stack, *args: str) -> str:  # type: ignore[no-untyped-def]
    r = stack.tpuq("submit", *args, check=False)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_before_any_host_a_submit_is_accepted_with_a_warning(stack):
    r = stack.tpuq("submit", "--tpu-type", "v4-8", "--", "/bin/true")
    assert r.stdout.startswith("submitted job 1")
    assert "warning: no host of type v4-8 has registered yet; the job waits for one" in r.stderr
    r = stack.tpuq("submit", "-q", "--", "/bin/true")
    assert r.stdout == "2\n", "-q prints the id alone"
    assert "warning: no host has registered yet" in r.stderr, "-q keeps warnings (stderr)"


@pytest.mark.parametrize("args, message", [
    (["--tpu-type", "v9-99"], "tpuq: error: unknown TPU type 'v9-99'"),
    (["--tpu-type", "v4-7"], "unknown TPU type 'v4-7' (did you mean v4-8?)"),
    (["--tpu-type", "v5litepd-8"], "unknown TPU type 'v5litepd-8' (did you mean v5litepod-8?)"),
    (["--chips", "8", "--tpu-type", "v4-8"], "a v4-8 host has 4 chips; --chips 8 cannot fit"),
])
def test_a_type_that_does_not_exist_or_cannot_hold_the_chips_is_refused(stack, args, message):
    assert message in refused(stack, *args, "--", "/bin/true")
    assert stack.job_count() == 0


def test_refusals_against_registered_hosts_and_teams(stack, host):
    stack.start_agent(host, TPUQ_TPU_TYPE="v5litepod-4")
    stack.tpuq("quota", "set", "vision", "--max-chips", "2")
    assert refused(stack, "--chips", "3", "--", "/bin/true") == \
        "tpuq: error: no host offers 3 chips: 4-chip hosts allow 1, 2, 4"
    assert refused(stack, "--team", "visoin", "--", "/bin/true").startswith(
        "tpuq: error: no team named 'visoin' (did you mean vision?)")
    assert refused(stack, "--team", "vision", "--", "/bin/true") == \
        "tpuq: error: team vision may use 2 chips at once; this job needs 4 (a whole host)"
    assert refused(stack, "--team", "vision", "--chips", "4", "--", "/bin/true") == \
        "tpuq: error: team vision may use 2 chips at once; this job needs 4"
    assert stack.job_count() == 0, "nothing refused was queued"
    assert stack.tpuq("quota", "--json").returncode == 0
    teams = stack.tpuq("quota", "--json").stdout
    assert "visoin" not in teams, "a mistyped team is not created"
    ok = stack.submit("--team", "vision", "--chips", "2", "--", "/bin/true")
    assert stack.wait_state(ok, "succeeded")
