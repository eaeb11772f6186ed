"""Slice jobs: one job on every worker of a multi-host slice, started and stopped as one.

Four agents with distinct host names on fake devices form a fake v4-32 slice (4 workers
of 4 chips), each told its seat by settings, as the metadata server tells it on GCP.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.harness import FakeHost, Stack, fixture_cmd, wait_for
from tpuq.state.models import GangWorker

SLICE, TYPE, N = "pod-a", "v4-32", 4


def start_slice(stack: Stack, tmp_path: Path, workers: range = range(N), **env: str
                ) -> list[FakeHost]:
    hosts = [FakeHost(tmp_path / f"w{i}", name=f"{SLICE}-w{i}", chips=4) for i in range(N)]
    for i in workers:
        start_worker(stack, hosts[i], i, tmp_path, **env)
    return hosts


def start_worker(stack: Stack, host: FakeHost, i: int, tmp_path: Path, **env: str) -> None:
    seat = {"TPUQ_SLICE_NAME": SLICE, "TPUQ_SLICE_WORKER": str(i), "TPUQ_SLICE_TYPE": TYPE}
    if i:  # one state directory, one socket per agent: the CLI talks to worker 0's
        seat["TPUQ_AGENT_SOCKET"] = str(tmp_path / f"w{i}.sock")
    stack.start_agent(host, **seat, **env)


def started(out: Path, attempt: int = 1) -> dict[int, dict[str, str]]:
    return {int(p.name.rsplit(".", 1)[1]): json.loads(p.read_text())
            for p in out.glob(f"start.{attempt}.*")}


def workers(stack: Stack, job_id: int) -> list[GangWorker]:
    with stack.db.read() as s:
        return list(s.query(GangWorker).filter_by(job_id=job_id)
                    .order_by(GangWorker.attempt, GangWorker.worker))


def test_a_slice_job_runs_one_task_on_every_worker_at_once(stack, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    start_slice(stack, tmp_path)
    job = stack.submit("--tpu-type", TYPE, *fixture_cmd("gang_task.py", out, "ok"))
    stack.wait_state(job, "succeeded", timeout=60)
    seen = started(out)
    assert sorted(seen) == [0, 1, 2, 3]
    for w, e in seen.items():
        assert e["TPUQ_WORKER_ID"] == str(w) and e["TPUQ_NUM_WORKERS"] == "4"
        assert e["TPUQ_SLICE"] == SLICE and e["TPUQ_HOST"] == f"{SLICE}-w{w}"
        assert e["JAX_COORDINATOR_PORT"] == "8476"
        assert e["TPU_VISIBLE_CHIPS"] is None, "a slice job's task owns its whole host"
    assert len({e["TPUQ_CHECKPOINT_DIR"] for e in seen.values()}) == 1
    (att,) = stack.attempts(job)
    assert att.host == SLICE and len(att.chips) == 16, "charged for every chip of the slice"
    assert [(g.worker, g.host, g.outcome, g.exit_code) for g in workers(stack, job)] == \
        [(w, f"{SLICE}-w{w}", "succeeded", 0) for w in range(N)]
    assert stack.job(job).reason == "all 4 workers exited 0"
    # -f: until every worker's log is read whole (a worker's end reaches its stream
    # just after the job's end)
    every = stack.tpuq("logs", str(job), "--worker", "all", "-f")
    for w in range(N):
        assert f"[w{w}] worker {w} of 4 started" in every.stdout
    assert stack.tpuq("logs", str(job)).stdout.strip() == "worker 0 of 4 started"
    assert "worker 2 of 4 started" in stack.tpuq("logs", str(job), "--worker", "2").stdout
    if stack.deployment == "team":  # type: ignore[attr-defined]
        # read through worker 0's agent: the other workers' output comes from their own
        # log streams in Redis, as it would on a pod whose workers share no directory
        for w in range(1, N):
            assert f"attempt 1's output comes from {SLICE}-w{w}'s log stream" in every.stderr
        away = stack.tpuq("logs", str(job), "--worker", "3", "-f", TPUQ_HOST="laptop",
                          TPUQ_AGENT_SOCKET="/nonexistent/agent.sock")
        assert away.stdout == "worker 3 of 4 started\n", away
    status = json.loads(stack.tpuq("status", "--json").stdout)
    assert next(j for j in status if j["id"] == job)["host"] == SLICE
    table = stack.tpuq("status", COLUMNS="200").stdout
    rows = [line for line in table.splitlines() if f"{TYPE} {SLICE} w" in line]
    assert [r.split()[0] for r in rows] == [f"{SLICE}-w{w}" for w in range(N)], table


def test_one_worker_failing_stops_every_worker_and_fails_the_job(stack, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    start_slice(stack, tmp_path)
    job = stack.submit("--tpu-type", TYPE, "--grace", "20",
                       *fixture_cmd("gang_task.py", out, "fail:2"))
    done = stack.wait_state(job, "failed", timeout=60)
    assert done.exit_code == 3 and "worker 2 (pod-a-w2)" in (done.reason or ""), done.reason
    assert sorted(p.name for p in out.glob("term.1.*")) == ["term.1.0", "term.1.1", "term.1.3"]
    assert all(not g.lease_expires_at for g in workers(stack, job))
    shown = stack.tpuq("show", str(job)).stdout
    assert "  w2  pod-a-w2  pid " in shown and "failed, exit 3" in shown, shown
    with stack.db.read() as s:
        from tpuq.state.models import Allocation

        assert s.query(Allocation).count() == 0, "every worker's chips released"


def test_a_cancel_stops_every_worker(stack, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    start_slice(stack, tmp_path)
    job = stack.submit("--tpu-type", TYPE, *fixture_cmd("gang_task.py", out, "hang"))
    wait_for(lambda: len(started(out)) == N, 60, "every worker to start")
    stack.tpuq("cancel", str(job))
    stack.wait_state(job, "cancelled", timeout=60)
    assert len(list(out.glob("term.1.*"))) == N


def test_a_worker_killed_mid_run_stops_the_gang(stack, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    start_slice(stack, tmp_path)
    job = stack.submit("--tpu-type", TYPE, *fixture_cmd("gang_task.py", out, "hang"))
    wait_for(lambda: len(started(out)) == N and all(g.pid for g in workers(stack, job)), 60,
             "every worker to run")
    os.killpg(workers(stack, job)[1].pid, signal.SIGKILL)
    done = stack.wait_state(job, "failed", timeout=60)
    assert done.exit_signal == 9 and "worker 1" in (done.reason or "")
    assert sorted(p.name for p in out.glob("term.1.*")) == ["term.1.0", "term.1.2", "term.1.3"]


def test_a_notice_on_one_worker_requeues_the_whole_gang(stack, tmp_path, metadata):
    out = tmp_path / "out"
    out.mkdir()
    hosts = start_slice(stack, tmp_path, workers=range(3))
    start_worker(stack, hosts[3], 3, tmp_path, TPUQ_METADATA_URL=metadata.url)
    job = stack.submit("--tpu-type", TYPE, *fixture_cmd("gang_task.py", out, "hang"))
    wait_for(lambda: len(started(out)) == N, 60, "every worker to start")
    metadata.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    wait_for(lambda: len(list(out.glob("term.1.*"))) == N, 60,
             "every worker to get the stop signal")
    stack.wait_state(job, "queued", timeout=60)
    assert stack.job(job).preemptions == 1 and stack.job(job).failures == 0
    metadata.set("instance/maintenance-event", "NONE")
    stack.wait_state(job, "succeeded", timeout=60)
    assert sorted(started(out, 2)) == [0, 1, 2, 3]


def test_a_worker_whose_agent_is_down_blocks_the_start(stack, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    hosts = start_slice(stack, tmp_path)
    stack.agents[-1].stop()
    job = stack.submit("--tpu-type", TYPE, *fixture_cmd("gang_task.py", out, "ok"))
    wait_for(lambda: "worker 3 (pod-a-w3) agent stopped" in (next(
        j for j in json.loads(stack.tpuq("status", "--json").stdout)
        if j["id"] == job)["waiting_for"] or ""), 30, "the reason to name the stopped worker")
    assert stack.job(job).state == "queued" and not list(out.iterdir()), "nothing ran"
    start_worker(stack, hosts[3], 3, tmp_path)
    stack.wait_state(job, "succeeded", timeout=60)


def test_jax_distributed_initialises_across_the_workers(stack, tmp_path):
    """The coordinator port tpuq chooses is where the workers meet (JAX on CPU)."""
    from tests.services import free_port

    out = tmp_path / "out"
    out.mkdir()
    start_slice(stack, tmp_path, TPUQ_COORDINATOR_PORT=str(free_port()))
    job = stack.submit("--tpu-type", TYPE, *fixture_cmd("jax_gang.py", out))
    stack.wait_state(job, "succeeded", timeout=120)
    assert {p.name: p.read_text() for p in out.iterdir()} == \
        {f"gathered.{w}": "1,11,21,31" for w in range(N)}
    assert "[w3] worker 3: process 3 of 4" in \
        stack.tpuq("logs", str(job), "--worker", "all", "-f").stdout


def test_a_worker_whose_host_dies_mid_run_requeues_the_gang_uncharged(stack, tmp_path):
    """Worker 2's host goes away (its agent, keeper and task killed): its row's lease runs
    out, worker 0 stops the other three and requeues the job as lost, not charged; it
    runs again once worker 2's agent is back."""
    out = tmp_path / "out"
    out.mkdir()
    fast = {"TPUQ_LEASE_S": "3", "TPUQ_HEARTBEAT_S": "1", "TPUQ_RETRY_BACKOFF_S": "0.5"}
    hosts = start_slice(stack, tmp_path, **fast)
    job = stack.submit("--tpu-type", TYPE, *fixture_cmd("gang_task.py", out, "hang"))
    wait_for(lambda: len(started(out)) == N and all(g.pid for g in workers(stack, job)), 60,
             "every worker to run")
    stack.agents[2].kill()
    stack.kill_keepers(hosts[2])
    os.killpg(workers(stack, job)[2].pid, signal.SIGKILL)
    wait_for(lambda: stack.job(job).attempt == 1 and stack.job(job).state == "queued"
             or stack.job(job).attempt > 1, 60, "the gang requeued")
    first = stack.attempts(job)[0]
    assert first.outcome == "lost" and "worker 2 (pod-a-w2) lost" in (first.reason or "")
    assert stack.job(job).failures == 0, "a lost worker is not the job's failure"
    assert sorted(p.name for p in out.glob("term.1.*")) == ["term.1.0", "term.1.1", "term.1.3"]
    start_worker(stack, hosts[2], 2, tmp_path, **fast)
    stack.wait_state(job, "succeeded", timeout=60)
    # (an attempt assigned before worker 2's silence showed may have been given back)
    assert sorted(started(out, stack.job(job).attempt)) == [0, 1, 2, 3]
    assert stack.job(job).failures == 0


def test_a_worker_not_ready_by_the_deadline_requeues_the_gang_before_anything_runs(
        team_stack, tmp_path):
    """Worker 3's agent is frozen (SIGSTOP) while the slice looks alive: the gang is
    assigned, the other three get ready, and worker 0 gives up at TPUQ_GANG_START_S with
    nothing started anywhere; once worker 3 thaws, the job runs on all four.

    The team deployment only, as a pod slice always is: frozen at a random moment, an
    agent of the embedded deployment can hold SQLite's one write lock, and every other
    agent of that database (and the CLI's submit) then waits on it."""
    stack = team_stack
    out = tmp_path / "out"
    out.mkdir()
    start_slice(stack, tmp_path, TPUQ_GANG_START_S="2", TPUQ_RETRY_BACKOFF_S="0.5")
    frozen = stack.agents[3]
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        job = stack.submit("--tpu-type", TYPE, *fixture_cmd("gang_task.py", out, "ok"))
        wait_for(lambda: bool(stack.attempts(job)) and stack.attempts(job)[0].outcome, 60,
                 "the first attempt to end")
        first = stack.attempts(job)[0]
        assert first.outcome == "host_error", first.reason
        assert "gang start: worker 3 (pod-a-w3) not ready within 2s" in (first.reason or "")
        assert not list(out.iterdir()), "no worker started before all were ready"
        assert stack.job(job).failures == 0
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    stack.wait_state(job, "succeeded", timeout=60)
    assert sorted(started(out, stack.job(job).attempt)) == [0, 1, 2, 3]


def test_a_jax_training_gang_stopped_by_a_notice_resumes_bit_identical(stack, tmp_path,
                                                                      metadata):
    """A notice on worker 3 stops all four at one agreed step (JAX's preemption sync
    point, reached on CPU as on a TPU pod); they save, exit 75, are requeued as one, and
    resume from that step once the notice clears: the final parameters are the very
    bytes of an uninterrupted run, and no step is lost."""
    from tests.services import free_port

    steps = "200"
    # JAX's preemption service tells every worker of worker 3's signal: they stop at one
    # step, before tpuq's own gang stop reaches them (their next lease renewal)
    env = {"TPUQ_COORDINATOR_PORT": str(free_port())}
    hosts = start_slice(stack, tmp_path, workers=range(3), **env)
    start_worker(stack, hosts[3], 3, tmp_path, TPUQ_METADATA_URL=metadata.url, **env)
    ref, out = tmp_path / "ref", tmp_path / "out"
    ref.mkdir()
    out.mkdir()
    clean = stack.submit("--tpu-type", TYPE, *fixture_cmd("jax_gang_train.py", ref, steps))
    stack.wait_state(clean, "succeeded", timeout=180)
    job = stack.submit("--tpu-type", TYPE, *fixture_cmd("jax_gang_train.py", out, steps))
    wait_for(lambda: int((out / "step.1").read_text() or 0) >= 25
             if (out / "step.1").exists() else False, 120, "25 steps of the first attempt")
    metadata.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    stack.wait_state(job, "queued", timeout=90)
    first = stack.attempts(job)[0]
    assert first.outcome == "preempted" and stack.job(job).failures == 0
    stopped_at = int((out / "step.1").read_text())
    metadata.set("instance/maintenance-event", "NONE")
    stack.wait_state(job, "succeeded", timeout=180)
    assert int((out / "resumed.2").read_text()) == stopped_at, "no step lost"
    assert 25 <= stopped_at < int(steps)
    assert (out / "final").read_text() == (ref / "final").read_text()


def test_workers_learn_their_seat_from_their_own_metadata_servers(stack, tmp_path):
    """As on GCP: no slice settings, each agent reads accelerator-type, its
    agent-worker-number and the node's name (tpu-env NODE_ID) from a metadata server of
    its own, and the four form one slice a v4-32 job runs on."""
    from contextlib import ExitStack

    from tests.fakes.metadata_server import FakeMetadata

    out = tmp_path / "out"
    out.mkdir()
    with ExitStack() as servers:
        for i in range(N):
            md = servers.enter_context(FakeMetadata())
            md.set("instance/attributes/accelerator-type", TYPE)
            md.set("instance/attributes/agent-worker-number", str(i))
            md.set("instance/attributes/tpu-env",
                   f"ACCELERATOR_TYPE: '{TYPE}'\nNODE_ID: 'pod-m'\nWORKER_ID: '{i}'\n")
            host = FakeHost(tmp_path / f"m{i}", name=f"pod-m-w{i}", chips=4)
            stack.start_agent(host, TPUQ_METADATA_URL=md.url,
                              **({"TPUQ_AGENT_SOCKET": str(tmp_path / f"m{i}.sock")} if i else {}))
        job = stack.submit("--tpu-type", TYPE, *fixture_cmd("gang_task.py", out, "ok"))
        stack.wait_state(job, "succeeded", timeout=60)
    assert sorted(started(out)) == [0, 1, 2, 3]
    assert {e["TPUQ_SLICE"] for e in started(out).values()} == {"pod-m"}
    assert stack.attempts(job)[0].host == "pod-m"
