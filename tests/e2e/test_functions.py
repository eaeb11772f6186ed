"""A Python function submitted from Python (`tpuq.client.submit(fn, ...)`), as submitit
does on SLURM: its value comes back, its exception is raised with the remote traceback,
a preempted call runs again and still returns, and what cannot be sent is refused in
one line. Both deployments; the call runs in a fresh interpreter on the host."""

from __future__ import annotations

import os

import pytest

from tests.harness import wait_for
from tpuq.client import ClientError, Job, JobError, submit
from tpuq.protocol import Failure
from tpuq.settings import load


def settings(stack):  # type: ignore[no-untyped-def]
    """The test's own account, not a name it acts under (TPUQ_USER): only a job's owner,
    by their own account, loads its result (a pickle runs its writer's code)."""
    return load(stack.env(TPUQ_USER=""))


def test_a_functions_value_and_output_come_back(stack, host):
    stack.start_agent(host)
    scale = 10  # captured by the closure: pickled by value, as in a notebook

    def train(lr: float, *, steps: int) -> dict:
        print(f"training lr={lr} steps={steps}", flush=True)
        return {"loss": lr * steps * scale, "attempt": os.environ["TPUQ_ATTEMPT"],
                "pid": os.getpid()}

    job = submit(train, 0.5, steps=4, chips=1, settings=settings(stack))
    out = job.result(timeout=60)
    assert out["loss"] == 20.0 and out["attempt"] == "1"
    assert out["pid"] != os.getpid()
    assert job.state() == "succeeded"
    assert "training lr=0.5 steps=4" in job.logs()
    assert stack.job(job.id).name == "test_a_functions_value_and_output_come_back.<locals>.train"


def test_a_functions_exception_is_raised_here_with_the_remote_traceback(stack, host):
    stack.start_agent(host)

    def diverge(lr: float) -> None:
        raise FloatingPointError(f"loss is nan at lr={lr}")

    job = submit(diverge, 3.0, settings=settings(stack))
    with pytest.raises(FloatingPointError, match="loss is nan at lr=3.0") as caught:
        job.result(timeout=60)
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert f"remote traceback (job {job.id})" in notes and "in diverge" in notes
    assert job.state() == "failed"

    class Unpicklable(Exception):
        def __reduce__(self):  # type: ignore[no-untyped-def]
            raise TypeError("not this one")

    def odd() -> None:
        raise Unpicklable("x")

    with pytest.raises(JobError, match="(?s)raised:\n.*Unpicklable: x"):
        submit(odd, settings=settings(stack)).result(timeout=60)


def test_a_preempted_call_runs_again_and_returns(stack, host):
    stack.start_agent(host)

    def resumable(path: str) -> str:
        import time

        if os.environ["TPUQ_ATTEMPT"] == "1":
            open(path, "w").close()  # the test preempts once this exists
            time.sleep(600)
        return f"done on attempt {os.environ['TPUQ_ATTEMPT']}"

    marker = str(stack.home / "started")
    job = submit(resumable, marker, settings=settings(stack))
    wait_for(lambda: os.path.exists(marker), what="the first attempt running")
    stack.tpuq("preempt", str(job.id))
    assert job.result(timeout=60) == "done on attempt 2"
    assert [a.outcome for a in stack.attempts(job.id)] == ["preempted", "succeeded"]


def test_what_cannot_be_sent_is_refused_in_one_line(stack, host):
    stack.start_agent(host)
    cfg = settings(stack)
    with pytest.raises(ClientError, match="pickle to [0-9]+ bytes; at most 524288") as big:
        submit(len, b"x" * 600_000, settings=cfg)
    assert big.value.kind is Failure.REFUSED
    with pytest.raises(ClientError, match="cannot be pickled"):
        submit(len, (x for x in range(3)), settings=cfg)
    with pytest.raises(ClientError, match="--chips must be at least 1"):
        submit(len, "x", chips=0, settings=cfg)
    with pytest.raises(ClientError, match="is not a function job") as plain:
        Job(stack.submit("--", "/bin/true"), cfg).result(timeout=60)
    assert plain.value.kind is Failure.NOT_FOUND
    assert stack.job_count() == 1, "nothing refused was queued"
