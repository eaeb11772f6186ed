"""Several jobs on one host: chip subsets with their own chips and ports, whole-host jobs
that wait for a free host, and shapes no host can give refused at submit."""

from __future__ import annotations

import json

from tests.harness import fixture_cmd, wait_for


def waiting_for(stack, job_id: int) -> str | None:  # type: ignore[no-untyped-def]
    jobs = json.loads(stack.tpuq("status", "--json").stdout)
    return next(j["waiting_for"] for j in jobs if j["id"] == job_id)


def test_four_one_chip_jobs_share_one_host_at_the_same_time(stack, host, tmp_path):
    out = tmp_path / "party"
    out.mkdir()
    stack.start_agent(host)
    ids = [stack.submit("--chips", "1", *fixture_cmd("chip_party.py", out, 4, 60))
           for _ in range(4)]
    # each job exits 0 only once all four have started: success proves they overlapped
    stack.wait_all(ids, "succeeded", timeout=90)
    seen = [json.loads((out / f"start.{i}").read_text()) for i in ids]
    assert sorted(e["TPU_VISIBLE_CHIPS"] for e in seen) == ["0", "1", "2", "3"]
    ports = [e["TPU_PROCESS_PORT"] for e in seen] + [e["TPU_MESH_CONTROLLER_PORT"] for e in seen]
    assert None not in ports and len(set(ports)) == 8, ports
    assert {e["ALLOW_MULTIPLE_LIBTPU_LOAD"] for e in seen} == {"1"}
    assert {e["TPU_CHIPS_PER_PROCESS_BOUNDS"] for e in seen} == {"1,1,1"}
    assert sorted(c for i in ids for a in stack.attempts(i) for c in a.chips) == [0, 1, 2, 3]


def test_whole_host_job_waits_until_the_host_is_free(stack, host, tmp_path):
    gate = tmp_path / "gate"
    stack.start_agent(host)
    small = stack.submit("--chips", "1", *fixture_cmd("wait_file.py", gate))
    stack.wait_state(small, "running")
    whole = stack.submit("--", "/bin/true")
    wait_for(lambda: waiting_for(stack, whole) == f"{host.name} reserved for it, start "
             "unknown (running jobs there have no time limit)", 30,
             "the whole-host job to hold the host, waiting for it to be free")
    assert stack.job(whole).state == "queued"
    gate.touch()
    stack.wait_all([small, whole], "succeeded")
    (blocker,), (run,) = stack.attempts(small), stack.attempts(whole)
    assert run.chips == [0, 1, 2, 3]
    assert run.started_at >= blocker.ended_at, "the whole host never overlaps a subset job"


def test_a_chip_count_no_host_gives_is_refused_at_submit(stack, host):
    r = stack.tpuq("submit", "--chips", "3", "--", "/bin/true", check=False)
    assert r.returncode == 0, "no host registered yet: the job is accepted and waits"
    stack.start_agent(host)
    r = stack.tpuq("submit", "--chips", "3", "--", "/bin/true", check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == "tpuq: error: no host offers 3 chips: 4-chip hosts allow 1, 2, 4"
    assert stack.submit("--chips", "2", "--", "/bin/true") > 0
