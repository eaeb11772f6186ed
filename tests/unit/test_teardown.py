"""Chips are free before the next job starts: after killing what an earlier attempt
left, the agent waits for it to let go of the chips (TPUQ_CHIP_RELEASE_S), and what still
holds them keeps the next job from starting into a busy TPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tpuq import jobenv
from tpuq.agent.attempts.executor import Executor
from tpuq.agent.tpu import holders
from tpuq.agent.tpu.devices import Chip
from tpuq.settings import Settings
from tpuq.state import hosts
from tpuq.state.db import Database


def test_an_orphan_that_has_not_let_go_after_the_kill_still_blocks_the_chips(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    device = tmp_path / "accel0"
    device.touch()
    cfg = Settings(home=str(tmp_path / "home"), host="tpu-a", chip_release_s=60.0)
    db = Database(cfg.db_url)
    db.upgrade()
    ex = Executor(cfg, db, hosts.Held("tpu-a", "x"), boot_id="b",
                  chips=[Chip(0, (str(device),))], tpu_type=None, on_change=lambda: None)
    dying = holders.ProcInfo(
        pid=4242, start_ticks=1, uid=0, user="root", session=4242, cmdline="python train.py",
        environ_marker={jobenv.HOST: "tpu-a", jobenv.JOB_ID: "7", jobenv.ATTEMPT: "1",
                        jobenv.CHECKPOINT_DIR: f"{cfg.checkpoints_dir}/x/7"})
    waited: list[float] = []

    def kill_and_wait(targets: list[tuple[int, int]], timeout: float) -> list[int]:
        waited.append(timeout)
        return [pid for pid, _ in targets]  # still releasing its vfio device

    monkeypatch.setattr(holders, "find_holders", lambda *a, **k: [dying])
    monkeypatch.setattr(holders, "kill_and_wait", kill_and_wait)
    try:
        left: Any = ex.clear_holders((0,))
        assert left == [dying], "a holder that outlived the wait keeps the job from starting"
        assert waited == [60.0], "the wait is TPUQ_CHIP_RELEASE_S, not a fixed time"
        assert ex.claim_tpu((0,)) == holders.held_by([dying])
    finally:
        ex.devwatch.close()
        db.dispose()
