"""Slice jobs in the pure parts: the scheduler's all-or-none placement, the gang's end,
a host's seat in its slice."""

from __future__ import annotations

import pytest

from tpuq.agent.errors import AgentError, HostUnfit
from tpuq.agent.gce.topology import multislice_coordinator, seat_of, tpu_env_value
from tpuq.scheduler.policy import HostView, JobView, TeamView, plan
from tpuq.settings import Settings
from tpuq.shapes import Seat, slice_hosts
from tpuq.state.gangs import Member, gang_ending
from tpuq.state.states import Outcome


def worker(i: int, slice_: str = "pod-a", free: bool = True, ok: bool = True) -> HostView:
    chips = (0, 1, 2, 3)
    return HostView(f"{slice_}-w{i}", "v4-8", chips, frozenset(chips if free else ()),
                    schedulable=ok, out_of_service="" if ok else "agent stopped",
                    slice=slice_, worker=i, slice_type="v4-32")


def job(i: int, **kw: object) -> JobView:
    return JobView(id=i, team="t", user="u", priority=0, submitted_at=float(i), chips=None,
                   tpu_type="v4-32", workers=4, **kw)  # type: ignore[arg-type]


def test_slice_types_span_hosts() -> None:
    assert [slice_hosts(t) for t in ("v4-8", "v4-32", "v5litepod-16", "v6e-8", "v5p-64")] == \
        [1, 4, 4, 1, 8]


def test_a_free_complete_slice_is_given_whole_and_once() -> None:
    hosts = [worker(i) for i in range(4)] + [HostView("single", "v4-8", (0, 1, 2, 3),
                                                      frozenset(range(4)))]
    p = plan([job(1), job(2)], hosts, {}, now=100.0)
    (a,) = p.assignments
    assert a.job_id == 1 and a.host == "pod-a" and len(a.chips) == 16
    assert a.workers == tuple((f"pod-a-w{i}", (0, 1, 2, 3)) for i in range(4))
    assert p.waiting[2] == "waiting for a free v4-32 slice (pod-a in use)"


def test_slice_workers_never_take_single_host_jobs() -> None:
    single = JobView(id=1, team="t", user="u", priority=0, submitted_at=0.0, chips=1)
    p = plan([single], [worker(i) for i in range(4)], {}, now=1.0)
    assert not p.assignments


@pytest.mark.parametrize("hosts,reason", [
    ([worker(i) for i in range(3)], "slice pod-a: 3 of 4 workers registered (no worker 3)"),
    ([worker(0), worker(1), worker(2), worker(3, ok=False)],
     "slice pod-a: worker 3 (pod-a-w3) agent stopped"),
    ([worker(0), worker(1, free=False), worker(2), worker(3)],
     "waiting for a free v4-32 slice (pod-a in use)"),
    ([], "no v4-32 slice has registered (its workers' agents register it)"),
])
def test_nothing_partial_and_a_true_reason(hosts: list[HostView], reason: str) -> None:
    p = plan([job(1)], hosts, {}, now=1.0)
    assert not p.assignments and p.waiting[1] == reason


def test_a_slice_job_is_charged_every_chip_of_the_slice() -> None:
    teams = {"t": TeamView("t", max_chips=8)}
    p = plan([job(1)], [worker(i) for i in range(4)], teams, now=1.0)
    assert not p.assignments and "8 chips" in p.waiting[1]


def m(w: int, state: str = "ended", outcome: str | None = "succeeded", untouched: bool = True,
      at: float = 1.0, lost: bool = False, code: int | None = 0) -> Member:
    return Member(w, f"h{w}", state, outcome, untouched, code, None, "exit", at, lost)


def test_the_gang_ends_only_when_every_worker_has() -> None:
    assert gang_ending([m(0), m(1, state="running", outcome=None)]) is None
    end = gang_ending([m(0), m(1)])
    assert end is not None and end.outcome is Outcome.SUCCEEDED and end.exit_code == 0


def test_the_first_worker_to_end_by_itself_decides() -> None:
    ms = [m(0, untouched=False, outcome="preempted"), m(1, outcome="failed", code=3, at=5.0),
          m(2, outcome="requeued", code=75, at=9.0), m(3, untouched=False, outcome="failed")]
    end = gang_ending(ms)
    assert end is not None and end.outcome is Outcome.FAILED and end.exit_code == 3
    assert end.reason.startswith("worker 1 (h1)")
    ms[2] = m(2, outcome="requeued", code=75, at=2.0)  # exit 75 first: the gang requeues
    end = gang_ending(ms)
    assert end is not None and end.outcome is Outcome.REQUEUED and end.exit_code == 75


def test_a_lost_worker_requeues_the_gang_uncharged() -> None:
    end = gang_ending([m(0, untouched=False, outcome="preempted"),
                       m(1, state="running", outcome=None, lost=True)])
    assert end is not None and end.outcome is Outcome.LOST


def test_a_worker_whose_host_fell_silent_first_is_the_cause_though_the_others_ended_first(
        ) -> None:
    """Its keeper's stop signal let JAX's preemption service save the gang and exit 75
    before the loss was known: the loss, which came first, is what stopped it."""
    ms = [m(0, outcome="requeued", code=75, at=9.5), m(1, outcome="requeued", code=75, at=9.6),
          Member(2, "h2", "running", None, False, None, None, None, None, True, 7.0),
          m(3, outcome="requeued", code=75, at=9.5)]
    end = gang_ending(ms)
    assert end is not None and end.outcome is Outcome.LOST and "worker 2 (h2) lost" in end.reason
    ms[2] = Member(2, "h2", "running", None, False, None, None, None, None, True, 9.9)
    end = gang_ending(ms)
    assert end is not None and end.outcome is Outcome.REQUEUED, "the exits came first"


def test_a_loss_or_a_failure_breaks_the_gang_an_exit_75_does_not() -> None:
    from tpuq.state.gangs import breaks_the_gang

    assert breaks_the_gang(m(1, state="running", outcome=None, lost=True))
    assert breaks_the_gang(m(1, outcome="failed", code=3))
    assert breaks_the_gang(m(1, outcome="host_error"))
    assert not breaks_the_gang(m(1, outcome="requeued", code=75))
    assert not breaks_the_gang(m(1, outcome="preempted"))


def test_a_workers_row_says_why_tpuq_stopped_it() -> None:
    from types import SimpleNamespace

    from tpuq.state.attempts import Ending
    from tpuq.state.gangs import worker_ending

    killed = Ending(Outcome.FAILED, "killed by signal 9 (SIGKILL)", None, 9)
    gang = SimpleNamespace(attempt=1, state="preempting", stop_request="broken",
                           reason="worker 2 (h2) lost its agent: stopping the gang")
    end = worker_ending(gang, 1, killed)
    assert end.outcome is Outcome.PREEMPTED and end.exit_signal == 9
    assert end.reason.startswith("stopped with the gang (worker 2 (h2) lost its agent")
    over = SimpleNamespace(attempt=2, state="queued", stop_request=None, reason="")
    assert worker_ending(over, 1, killed).reason.startswith("stopped: the attempt had ended")
    cancel = SimpleNamespace(attempt=1, state="preempting", stop_request="cancel", reason="x")
    assert worker_ending(cancel, 1, killed).outcome is Outcome.CANCELLED
    own = Ending(Outcome.FAILED, "exit 3", 3, untouched=True)
    assert worker_ending(gang, 1, own) is own, "its own end is its own"
    fenced = Ending(Outcome.LOST, "stopped by its keeper")
    assert worker_ending(gang, 1, fenced) is fenced


def test_seat_from_settings_or_metadata() -> None:
    s = Settings(slice_name="pod-a", slice_worker=2, slice_type="v4-32")
    assert seat_of(s, None) == Seat("pod-a", 2, "v4-32")
    topo = {"accelerator_type": "v4-32", "agent_worker_number": 1,
            "tpu_env": "ACCELERATOR_TYPE: 'v4-32'\nNODE_ID: 'my-pod'\n"}
    assert seat_of(Settings(), topo) == Seat("my-pod", 1, "v4-32")
    assert seat_of(Settings(), {"accelerator_type": "v4-8"}) is None
    assert tpu_env_value("NODE_ID: 'x'", "NODE_ID") == "x"
    with pytest.raises(AgentError, match="worker 4 of a v4-32 slice must be 0..3"):
        seat_of(Settings(slice_name="p", slice_worker=4, slice_type="v4-32"), None)
    with pytest.raises(AgentError, match="multi-host type"):
        seat_of(Settings(slice_name="p", slice_worker=0, slice_type="v4-8"), None)


def test_a_slice_worker_without_tpu_env_falls_back_to_what_every_worker_sees() -> None:
    """A TPU VM made through Compute Engine may lack the Cloud TPU metadata (tpu-env):
    the workers still agree on a name; none of them crash-loops."""
    ends = "unknown:unknown:10.0.0.5,unknown:unknown:10.0.0.6"
    for me in (0, 1):
        topo = {"accelerator_type": "v4-16", "agent_worker_number": me,
                "worker_network_endpoints": ends, "instance_name": f"vm-{me}"}
        assert seat_of(Settings(), topo) == Seat("v4-16@10.0.0.5", me, "v4-16")
    named = {"accelerator_type": "v4-16", "agent_worker_number": 1,
             "instance_name": "t1v-n-abc-w-1"}
    assert seat_of(Settings(), named) == Seat("t1v-n-abc", 1, "v4-16")
    with pytest.raises(HostUnfit, match="TPUQ_SLICE_NAME"):
        seat_of(Settings(), {"accelerator_type": "v4-16", "agent_worker_number": 1,
                             "instance_name": "my-vm"})
    with pytest.raises(HostUnfit, match="agent-worker-number"):
        seat_of(Settings(), {"accelerator_type": "v4-16"})


def test_a_multislice_node_is_found_by_megascale_in_tpu_env() -> None:
    env = "NODE_ID: 'n'\nMEGASCALE_NUM_SLICES: '2'\nMEGASCALE_SLICE_ID: '1'\n"
    topo = {"tpu_env": env, "worker_network_endpoints": "t1v-w-0,t1v-w-1"}
    assert multislice_coordinator(topo) == "t1v-w-0"
    assert multislice_coordinator({"tpu_env": env}) == "localhost"
    assert multislice_coordinator({"tpu_env": "NODE_ID: 'n'\n"}) is None
    assert multislice_coordinator(None) is None


def test_a_slice_job_goes_back_to_the_slice_holding_its_checkpoints() -> None:
    hosts = [worker(i, "pod-a") for i in range(4)] + [worker(i, "pod-b") for i in range(4)]
    p = plan([job(1, home="pod-b", home_until=200.0)], hosts, {}, now=100.0)
    assert [a.host for a in p.assignments] == ["pod-b"]
    down = [worker(i, "pod-a") for i in range(4)] + \
        [worker(0, "pod-b"), worker(1, "pod-b", ok=False), worker(2, "pod-b"), worker(3, "pod-b")]
    p = plan([job(1, home="pod-b", home_until=200.0)], down, {}, now=100.0)
    assert not p.assignments and p.waiting[1].startswith("waiting for pod-b, which holds")
    p = plan([job(1, home="pod-b", home_until=200.0)], down, {}, now=201.0)
    assert [a.host for a in p.assignments] == ["pod-a"], "then it starts over elsewhere"
