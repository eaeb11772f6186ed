"""The example training scripts: an interrupted and resumed run equals an uninterrupted one."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import pytest

from tests.harness import step_delay

pytestmark = pytest.mark.jax

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
STEPS, EVERY = "120", "10"  # a few seconds per uninterrupted run on CPU
RUN_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cmd(script: str, ckpt: Path, out: Path, *extra: str) -> list[str]:
    cmd = [sys.executable, str(EXAMPLES / script), "--steps", STEPS, "--ckpt-every", EVERY,
           "--out", str(out), *extra]
    if script == "train_orbax.py":
        cmd += ["--ckpt-dir", str(ckpt), "--coord-port", str(_free_port())]
    return cmd


def _env(ckpt: Path, progress: Path, resumed: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUQ_")}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO), TPUQ_CHECKPOINT_DIR=str(ckpt),
               TPUQ_PROGRESS_FILE=str(progress), TPUQ_RESUMED="1" if resumed else "0")
    return env


def _run(script: str, ckpt: Path, out: Path, resumed: bool = False) -> str:
    proc = subprocess.run(
        _cmd(script, ckpt, out), env=_env(ckpt, ckpt.parent / "progress", resumed), check=False,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)  # end of output


def _run_and_preempt(script: str, ckpt: Path, out: Path) -> str:
    """Start a slow run, SIGTERM it after its first checkpoint line; expect exit 75."""
    proc = subprocess.Popen(
        _cmd(script, ckpt, out, "--step-delay", step_delay(script)),
        env=_env(ckpt, ckpt.parent / "progress", False),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout
    reader = threading.Thread(target=_pump, args=(stdout, lines))
    reader.start()
    seen: list[str] = []
    try:
        while True:
            line = lines.get(timeout=RUN_TIMEOUT_S)
            assert line is not None, "exited before a checkpoint:\n" + "".join(seen)
            seen.append(line)
            if line.startswith("checkpoint at step"):
                break
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=RUN_TIMEOUT_S) == 75, "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join(RUN_TIMEOUT_S)
        stdout.close()
    while (line := lines.get_nowait()) is not None:
        seen.append(line)
    return "".join(seen)


@pytest.mark.parametrize("script", ["train.py", "train_orbax.py"])
def test_preempt_and_resume_is_bit_identical(script: str, tmp_path: Path) -> None:
    _run(script, tmp_path / "a" / "ckpt", tmp_path / "a.hash")
    (tmp_path / "b").mkdir()
    ckpt_b, progress_b = tmp_path / "b" / "ckpt", tmp_path / "b" / "progress"

    first = _run_and_preempt(script, ckpt_b, tmp_path / "b.hash")
    assert "preempted at step" in first, first
    assert not (tmp_path / "b.hash").exists()  # it really stopped early
    assert any(ckpt_b.iterdir())

    second = _run(script, ckpt_b, tmp_path / "b.hash", resumed=True)
    assert "resumed from step" in second, second
    assert (tmp_path / "a.hash").read_text() == (tmp_path / "b.hash").read_text()

    if script == "train.py":  # only the tpuq-aware script reports progress
        last = json.loads(progress_b.read_text().splitlines()[-1])
        assert last["step"] == int(STEPS)
