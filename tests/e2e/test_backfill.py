"""No starvation by smaller jobs: a whole-host job queued behind one-chip jobs reserves
the host at once, and later one-chip jobs (no time limit) do not take its chips as they
free; a later job whose time limit ends before the reservation starts may (backfill)."""

from __future__ import annotations

from tests.harness import FakeHost, fixture_cmd


def test_a_whole_host_job_starts_as_soon_as_the_jobs_before_it_end(stack, tmp_path):
    host = FakeHost(tmp_path / "host", chips=8)
    stack.start_agent(host)
    gates = [tmp_path / f"gate{i}" for i in range(8)]
    first = [stack.submit("--chips", "1", *fixture_cmd("wait_file.py", g)) for g in gates]
    for job_id in first:
        stack.wait_process(job_id)
    whole = stack.submit("--", "/bin/true")
    later = [stack.submit("--chips", "1", "--", "/bin/true") for _ in range(24)]
    # the chips free one at a time: each is a chance for a later one-chip job to take it
    for gate, job_id in zip(gates, first, strict=True):
        gate.touch()
        stack.wait_state(job_id, "succeeded")
    stack.wait_all([whole, *later], "succeeded", timeout=120)
    whole_start = stack.attempts(whole)[-1].started_at
    last_of_first = max(stack.attempts(j)[-1].ended_at for j in first)
    starts = [stack.attempts(j)[-1].started_at for j in later]
    assert all(whole_start < s for s in starts), "a later one-chip job started first"
    assert whole_start >= last_of_first


def test_a_job_that_ends_before_the_reservation_starts_backfills(stack, tmp_path):
    host = FakeHost(tmp_path / "host", chips=4)
    stack.start_agent(host)
    gate, late_gate = tmp_path / "gate", tmp_path / "late"
    # one chip busy for at most an hour: the whole-host job's reservation starts by then
    busy = stack.submit("--chips", "1", "--time", "1h", *fixture_cmd("wait_file.py", gate))
    stack.wait_process(busy)
    whole = stack.submit("--", "/bin/true")
    unlimited = stack.submit("--chips", "1", "--", "/bin/true")
    short = stack.submit("--chips", "1", "--time", "10m",
                         *fixture_cmd("wait_file.py", late_gate))
    stack.wait_process(short)  # backfilled beside the reservation: it ends first
    assert stack.job(whole).state == "queued" and stack.job(unlimited).state == "queued"
    late_gate.touch()
    gate.touch()
    stack.wait_all([busy, whole, unlimited, short], "succeeded", timeout=60)
    assert stack.attempts(whole)[-1].started_at < stack.attempts(unlimited)[-1].started_at
