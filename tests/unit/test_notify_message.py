"""What a notification says, and which --notify values a spec takes: pure parts of
notifications (tests/e2e/test_notify.py sends them for real)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tpuq.agent.duties.notifier import message, scheme
from tpuq.spec import SpecError, notify_fields


def row(**over: object) -> SimpleNamespace:
    base = dict(job_id=12, event="failed", preemptions=0, count=None, name=None,
                command=["/venv/bin/python", "/home/a/train.py", "--lr", "3"], state="failed",
                reason="exit 3", exit_code=3, exit_signal=None, host="tpu-a", attempt=2,
                submitted_at=100.0, ended_at=3700.0, array_id=None, array_index=None)
    base.update(over)
    return SimpleNamespace(**base)


def test_an_end_names_the_job_its_outcome_and_what_to_run_next() -> None:
    said = message(row(), preempts=3)
    assert said is not None and said.kind == "failure"
    assert said.title == "tpuq: job 12 train.py failed"
    assert said.body.splitlines() == [
        "job 12 (train.py) failed on tpu-a after 2 attempts, 1h00m after its submission.",
        "exit: 3", "reason: exit 3", "", "tpuq show 12    tpuq logs 12"]
    task = message(row(event="succeeded", name="sweep", array_id=10, array_index=2), 3)
    assert task is not None and task.kind == "success"
    assert task.title == "tpuq: job 12 (array 10, task 2) sweep succeeded"


def test_a_start_says_where_and_how_long_it_waited() -> None:
    said = message(row(event="started", state="running", attempt=1, created_at=400.0), 3)
    assert said is not None and said.kind == "info"
    assert said.title == "tpuq: job 12 train.py started"
    assert said.body.splitlines()[0] == "job 12 (train.py) started on tpu-a, 5m00s after " \
        "its submission."
    again = message(row(event="started", state="running", attempt=3, created_at=400.0), 3)
    assert again is not None and ", attempt 3," in again.body


@pytest.mark.parametrize(("count", "told"), [(3, False), (4, True), (5, False)])
def test_a_preemption_is_told_once_when_the_count_exceeds_the_threshold(count: int,
                                                                        told: bool) -> None:
    said = message(row(event="preempted", count=count, state="queued"), preempts=3)
    assert (said is not None) == told
    if said:
        assert said.title.endswith(": preempted 4 times") and said.kind == "warning"


def test_destinations_are_named_by_scheme_only() -> None:
    assert scheme("slack://TokenA/TokenB/TokenC") == "slack://"


@pytest.mark.parametrize(("events", "urls", "stored"), [
    (None, None, (None, None)),
    ("fail", "json://h/p mailto://x", ("fail", "json://h/p\nmailto://x")),
    (None, "json://h/p", ("end", "json://h/p")),
    ("preempt,FAIL", "json://h/p", ("fail,preempt", "json://h/p")),
    ("all", "json://h/p", ("end,fail,preempt", "json://h/p")),
    ("start,end", "json://h/p", ("end,start", "json://h/p")),
    ("all,start", "json://h/p", ("end,fail,preempt,start", "json://h/p")),
    ("none", "json://h/p", (None, None)),
])
def test_notify_fields_are_stored_in_one_form(events: str | None, urls: str | None,
                                             stored: tuple[str | None, str | None]) -> None:
    assert notify_fields(events, urls) == stored


@pytest.mark.parametrize(("events", "urls", "says"), [
    ("fail", None, "to where?"),
    ("ends", "json://h/p", "one or more of end, fail, preempt"),
    (None, "hooks.slack.com/services/x", "a notification URL such as"),
    (None, "json://h/p\x07", "a notification URL such as"),
    (None, " ".join(["json://h/p"] * 17), "at most 16"),
    (3, "json://h/p", "--notify must be text"),
])
def test_bad_notify_fields_are_one_line(events: object, urls: object, says: str) -> None:
    with pytest.raises(SpecError, match=says):
        notify_fields(events, urls)


def test_an_attempt_that_starts_over_says_why_in_the_words_of_its_moment() -> None:
    why = "checkpoint on tpu-b not reachable from tpu-a: starting over"
    said = message(row(event="restarted", detail=why, state="running"), preempts=3)
    assert said is not None and said.kind == "warning"
    assert said.title == "tpuq: job 12 train.py starts over"
    assert said.body.splitlines()[:2] == [f"job 12 (train.py) starts over: {why}.",
                                          "it is now running."]
