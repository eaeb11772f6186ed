# ruff: noqa: E501 - golden tables are as wide as the terminals they stand for
"""`tpuq status` tables at fixed widths, character for character (golden tables): what a
person sees for a fixed queue, at a narrow terminal, a common one and a wide one. The
queue holds what makes tables hard: a long name, a 100-character team, a job with an
ETA, one cancelling, waiting reasons, a slice's workers. Pure rendering: no services."""

from __future__ import annotations

import io
from typing import Any

import pytest

from tpuq.jobjson import iso_time
from tpuq.spec import job_label

NOW = 1_800_000_000.0


def job(id_: int, state: str, **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": id_, "name": None, "state": state, "attempts": 1, "host": None,
        "exit_code": None, "exit_signal": None,
        "command": ["/home/ada/.venv/bin/python", "/home/ada/proj/train.py", "--lr", "3e-4"],
        "cwd": "/home/ada/proj", "owner": "ada", "team": "vision", "chips": None,
        "tpu_type": None, "priority": 0, "preemptions": 0, "failures": 0, "max_retries": 0,
        "submitted_at": NOW - 600, "ended_at": None, "reason": None, "waiting_for": None,
        "resubmit_of": None, "stop_signal": "SIGTERM", "grace": "30s",
        "time_limit": None, "stop_request": None, "notify": None, "array_id": None,
        "array_index": None, "started_at": None, "step": None, "step_at": None,
        "total": None, "eta_at": None}
    base.update(over)
    base["whole_host"] = base["chips"] is None
    base["name"] = job_label(base["name"], base["command"])
    for key in ("submitted_at", "ended_at", "started_at", "step_at", "eta_at"):
        base[key] = iso_time(base[key])  # the job object's times (tpuq/jobjson.py)
    return base


JOBS = [
    job(41, "running", host="tpu-a", chips=1, tpu_type="v4-8", started_at=NOW - 3725,
        step=1600, step_at=NOW - 20, total=10_000, eta_at=NOW + 7500),
    job(42, "running", host="tpu-a", chips=2, started_at=NOW - 65, step=40,
        step_at=NOW - 5, name="a-very-long-experiment-name-that-goes-on-and-on"),
    job(43, "preempting", host="tpu-a", chips=1, stop_request="cancel",
        started_at=NOW - 30, owner="grace", team="t" * 100,
        command=["/usr/bin/bash", "sweep.sh"]),
    job(44, "queued", chips=4, tpu_type="v4-8",
        waiting_for="over quota: team vision's cap of 8 v4 chips (7 in use)"),
    job(45, "held", waiting_for=None, owner="grace"),
    job(46, "failed", attempts=2, host="tpu-b", exit_code=3, ended_at=NOW - 90,
        reason="exited with code 3"),
]
HOSTS = [
    {"name": "tpu-a", "tpu_type": "v4-8", "chips": [0, 1, 2, 3], "used": 4,
     "jobs": [41, 42, 43], "heartbeat_at": NOW - 1, "state": "ok", "slice": None,
     "slice_type": None, "worker": None},
    {"name": "pod-a-w1", "tpu_type": "v4-32", "chips": [0, 1, 2, 3], "used": 0, "jobs": [],
     "heartbeat_at": NOW - 2, "state": "ok", "slice": "pod-a", "slice_type": "v4-32",
     "worker": 1},
    {"name": "pod-a-w0", "tpu_type": "v4-32", "chips": [0, 1, 2, 3], "used": 0, "jobs": [],
     "heartbeat_at": NOW - 40, "state": "agent silent for 40s", "slice": "pod-a",
     "slice_type": "v4-32", "worker": 0},
]


def render_at(width: int) -> str:
    from rich.console import Console

    from tpuq.cli import status

    out = io.StringIO()
    console = Console(file=out, width=width, highlight=False, color_system=None)
    mp = pytest.MonkeyPatch()
    mp.setenv("COLUMNS", str(width))
    mp.setattr(status.time, "time", lambda: NOW)
    try:
        view = status._view(JOBS, HOSTS, NOW, status.parse_format(status.DEFAULT))
        console.print(view, soft_wrap=False)
    finally:
        mp.undo()
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


GOLDEN: dict[int, str] = {
    60: (
        'ID  NAME                          USER   STATE       CHIPS\n'
        '41  train.py                      ada    running     1/v4-8\n'
        '42  a-very-long-experiment-name…  ada    running     2\n'
        '43  bash                          grace  cancelling  1\n'
        '44  train.py                      ada    queued      4/v4-8\n'
        '45  train.py                      grace  held        all\n'
        '46  train.py                      ada    failed      all\n'
        '\n'
        'HOST      TYPE            CHIPS  JOBS      HEARTBEAT\n'
        'pod-a-w0  v4-32 pod-a w0  0/4    -         40s\n'
        'pod-a-w1  v4-32 pod-a w1  0/4    -         2.0s\n'
        'tpu-a     v4-8            4/4    41,42,43  1.0s\n'
    ),
    100: (
        'ID  NAME                          USER   STATE       CHIPS   HOST   PROGRESS\n'
        '41  train.py                      ada    running     1/v4-8  tpu-a  step 1600/10000, ETA 2h05m\n'
        '42  a-very-long-experiment-name…  ada    running     2       tpu-a  step 40 (5.0s ago)\n'
        '43  bash                          grace  cancelling  1       tpu-a  -\n'
        '44  train.py                      ada    queued      4/v4-8  -      -\n'
        '45  train.py                      grace  held        all     -      -\n'
        '46  train.py                      ada    failed      all     tpu-b  -\n'
        '\n'
        'HOST      TYPE            CHIPS  JOBS      HEARTBEAT  STATE\n'
        'pod-a-w0  v4-32 pod-a w0  0/4    -         40s        agent silent for 40s\n'
        'pod-a-w1  v4-32 pod-a w1  0/4    -         2.0s       ok\n'
        'tpu-a     v4-8            4/4    41,42,43  1.0s       ok\n'
    ),
    160: (
        'ID  NAME                          USER   STATE       CHIPS   HOST   PROGRESS                    TIME       REASON\n'
        '41  train.py                      ada    running     1/v4-8  tpu-a  step 1600/10000, ETA 2h05m  1h02m\n'
        '42  a-very-long-experiment-name…  ada    running     2       tpu-a  step 40 (5.0s ago)          1m05s\n'
        '43  bash                          grace  cancelling  1       tpu-a  -                           30s\n'
        "44  train.py                      ada    queued      4/v4-8  -      -                           10m00s     over quota: team vision's cap of 8 v4 chips (7 in us…\n"
        '45  train.py                      grace  held        all     -      -                           10m00s     held: `tpuq release 45` lets it run\n'
        '46  train.py                      ada    failed      all     tpu-b  -                           1m30s ago  exited with code 3\n'
        '\n'
        'HOST      TYPE            CHIPS  JOBS      HEARTBEAT  STATE\n'
        'pod-a-w0  v4-32 pod-a w0  0/4    -         40s        agent silent for 40s\n'
        'pod-a-w1  v4-32 pod-a w1  0/4    -         2.0s       ok\n'
        'tpu-a     v4-8            4/4    41,42,43  1.0s       ok\n'
    ),
}


@pytest.mark.parametrize("width", sorted(GOLDEN))
def test_status_renders_the_golden_table(width: int) -> None:
    got = render_at(width)
    assert got == GOLDEN[width], f"\n{got}"
    assert max(map(len, got.splitlines())) <= width, "no row is wider than the terminal"


def _terminal_render(**env: str) -> str:
    from rich.console import Console

    from tpuq.cli import status

    out = io.StringIO()
    mp = pytest.MonkeyPatch()
    for k, v in env.items():
        mp.setenv(k, v)
    try:
        console = Console(file=out, width=160, highlight=False, force_terminal=True,
                          color_system="standard")
        console.print(status._view(JOBS, HOSTS, NOW, status.parse_format(status.DEFAULT)),
                      soft_wrap=False)
    finally:
        mp.undo()
    return out.getvalue()


def test_on_a_terminal_only_the_state_is_coloured_and_no_color_turns_it_off() -> None:
    coloured = _terminal_render()
    failed = next(line for line in coloured.splitlines() if line.startswith("46 "))
    assert "\x1b[31mfailed" in failed, repr(failed)  # red, the STATE cell alone
    assert failed.count("\x1b[31m") == 1
    assert "\x1b[1mID" in coloured, "the header is bold"
    plain = _terminal_render(NO_COLOR="1")
    assert "\x1b[31m" not in plain and "failed" in plain
