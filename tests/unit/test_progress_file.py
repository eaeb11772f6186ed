"""The progress file a job writes (tpuq.job.checkpointed), as the agent reads it back.

Under TPUQ_RUN_AS=owner the job's owner writes it and the root agent reads it: nothing
in it may hang, exhaust or crash the agent."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tpuq.agent.outcome import PROGRESS_TAIL, Progress
from tpuq.agent.outcome import last_progress as _last_progress


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
    from tpuq.agent.outcome import progress_of

    assert progress_of([]) is None
    assert progress_of([(5, 100.0, None)]) == Progress(5, 100.0)
    assert progress_of([(10, 100.0, 100)]) == Progress(10, 100.0, 100), "one report: no rate"
    # 40 steps in 20 s: 2 steps/s; 50 left -> 25 s after the last report
    assert progress_of([(10, 100.0, 100), (30, 110.0, 100), (50, 120.0, 100)]) == \
        Progress(50, 120.0, 100, 145.0)
    assert progress_of([(10, 100.0, 100), (100, 130.0, 100)]).eta_at is None, "done"
