"""What the log keeper takes for one attempt's files (tpuq/agent/duties/logkeeper.py)."""

from __future__ import annotations

import os
from pathlib import Path

from tpuq.agent.duties.logkeeper import scan


def test_an_attempts_log_and_what_lies_beside_it_are_one(tmp_path: Path) -> None:
    for name in ("12.1.log", "12.1.log.progress", "12.1.log.exit", "12.1.log.fn",
                 "12.1.log.result", "12.2.log", "12.2.w3.log", "12.2.w3.log.exit",
                 "notes.txt", "12.log", "x.1.log", "12.1.log.Evil"):
        (tmp_path / name).write_bytes(b"x" * 10)
    os.symlink("/etc/passwd", tmp_path / "13.1.log")  # counted by itself, never followed
    found = scan(str(tmp_path))
    assert sorted(found) == [(12, 1, 0), (12, 2, 0), (12, 2, 3), (13, 1, 0)]
    assert sorted(os.path.basename(p) for p in found[(12, 1, 0)].paths) == [
        "12.1.log", "12.1.log.exit", "12.1.log.fn", "12.1.log.progress", "12.1.log.result"]
    assert found[(12, 1, 0)].log_size == 10
    assert len(found[(12, 2, 3)].paths) == 2
    assert found[(13, 1, 0)].log_size < 100, "the link's own size, not its target's"
    assert scan(str(tmp_path / "missing")) == {}
