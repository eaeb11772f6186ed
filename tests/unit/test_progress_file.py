"""The progress file a job writes (tpuq.job.checkpointed), as the agent reads it back.

Under TPUQ_RUN_AS=owner the job's owner writes it and the root agent reads it: nothing
in it may hang, exhaust or crash the agent."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tpuq.agent.attempts.outcome import PROGRESS_TAIL, Progress
from tpuq.agent.attempts.outcome import last_progress as _last_progress


def line(step: int, t: float = 1.5) -> str:
    return json.dumps({"step": step, "time": t}) + "\n"


def test_the_last_good_line_wins(tmp_path: Path) -> None:
    p = tmp_path / "p"
    p.write_text(line(10) + line(20) + "garbage\n")
    assert _last_progress(str(p)) == Progress(20, 1.5)


def test_missing_file_means_no_progress(tmp_path: Path) -> None:
    assert _last_progress(str(tmp_path / "none")) is None


def test_a_huge_file_is_read_only_at_its_tail(tmp_path: Path) -> None:
    p = tmp_path / "p"
    with open(p, "w") as f:
        f.write(line(1))
        f.truncate(10 * 1024**3)  # a sparse 10 GiB: reading it whole would exhaust memory
    with open(p, "a") as f:
        f.write("\n" + line(7))
    assert _last_progress(str(p)) == Progress(7, 1.5)
    assert os.path.getsize(p) > 100 * PROGRESS_TAIL


def test_hostile_lines_are_skipped(tmp_path: Path) -> None:
    p = tmp_path / "p"
    p.write_text(line(3) + "[" * 20_000 + "\n" + '["not", "a dict"]\n' + '{"step": "x"}\n')
    assert _last_progress(str(p)) == Progress(3, 1.5)


def test_a_symlink_or_a_fifo_is_not_followed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_text(line(5))
    link = tmp_path / "link"
    link.symlink_to(real)
    assert _last_progress(str(link)) is None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert _last_progress(str(fifo)) is None, "returns at once instead of waiting for a writer"


def test_an_eta_comes_from_the_rate_of_the_reports_in_the_tail() -> None:
    from tpuq.agent.attempts.outcome import progress_of

    assert progress_of([]) is None
    assert progress_of([(5, 100.0, None)]) == Progress(5, 100.0)
    assert progress_of([(10, 100.0, 100)]) == Progress(10, 100.0, 100), "one report: no rate"
    # 40 steps in 20 s: 2 steps/s; 50 left -> 25 s after the last report
    assert progress_of([(10, 100.0, 100), (30, 110.0, 100), (50, 120.0, 100)]) == \
        Progress(50, 120.0, 100, 145.0)
    assert progress_of([(10, 100.0, 100), (100, 130.0, 100)]).eta_at is None, "done"


def test_numbers_out_of_range_are_skipped(tmp_path: Path) -> None:
    """What reaches the database and every user's `tpuq status` is a step that fits a
    BIGINT and a time that is a finite date (an infinite one is not JSON the CLI reads:
    the agent's status reply would be refused, for everyone)."""
    p = tmp_path / "p"
    hostile = [f'{{"step": {2**70}, "time": 1.5}}', '{"step": -3, "time": 1.5}',
               '{"step": 9, "time": Infinity}', '{"step": 9, "time": NaN}',
               '{"step": 9, "time": 1e300}', '{"step": 9, "time": -5}',
               f'{{"step": 9, "time": 1.5, "total": {2**64}}}', '{"step": true, "time": 2}']
    p.write_text(line(4) + "\n".join(hostile) + "\n")
    assert _last_progress(str(p)) == Progress(4, 1.5)


def test_an_eta_beyond_reason_is_none() -> None:
    from tpuq.agent.attempts.outcome import progress_of

    # one step in 1e9 s, 2**62 steps to go: an ETA of 1e27 s, not a date anyone can show
    assert progress_of([(1, 1.0, 2**62), (2, 1e9, 2**62)]) == Progress(2, 1e9, 2**62)
