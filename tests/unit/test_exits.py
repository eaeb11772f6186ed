from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tpuq.agent.exits import (
    BUSY_TPU_PATTERNS,
    EX_TEMPFAIL,
    Exit,
    decode_wait_status,
    from_returncode,
    read_tail,
    startup_failure,
    tpu_busy_message,
)


def _wait_status(code: str) -> int:
    """The raw os.waitpid status of a real child running `code`."""
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        _, status = os.waitpid(proc.pid, 0)
    finally:
        proc.returncode = 0  # reaped above; keep Popen from waiting again
    return status


def test_decode_real_exit_code() -> None:
    ended = decode_wait_status(_wait_status("raise SystemExit(3)"))
    assert ended == Exit(code=3, signal=None)
    assert ended.words == "exited with code 3" and not ended.succeeded


def test_decode_real_success() -> None:
    ended = decode_wait_status(_wait_status("pass"))
    assert ended == Exit(code=0, signal=None)
    assert ended.words == "exited 0" and ended.succeeded


def test_decode_real_signal() -> None:
    ended = decode_wait_status(_wait_status("import os; os.kill(os.getpid(), 9)"))
    assert ended == Exit(code=None, signal=9)
    assert ended.words == "killed by signal 9 (SIGKILL)" and not ended.succeeded


def test_decode_rejects_stopped_status() -> None:
    with pytest.raises(ValueError):
        decode_wait_status((signal.SIGSTOP << 8) | 0x7F)


def test_from_returncode_popen_convention() -> None:
    assert from_returncode(0) == Exit(0, None)
    assert from_returncode(EX_TEMPFAIL) == Exit(75, None)
    assert from_returncode(-15).words == "killed by signal 15 (SIGTERM)"
    # A shell's 128+n is an exit code, not a signal: only the process itself knows.
    assert from_returncode(137) == Exit(137, None)


def test_unknown_signal_and_missing_status_in_words() -> None:
    assert Exit(code=None, signal=200).words == "killed by signal 200"
    assert Exit(code=None, signal=None).words == "ended with no exit status"
    assert not Exit(code=0, signal=9).succeeded


BUSY_LINES = [
    "E0301 libtpu.so already in use by another process. Not attempting to load libtpu.so",
    (
        "The TPU is already in use by process with pid 4242. Not attempting to load libtpu.so "
        "in this process."
    ),
    "The TPU is already in use by another process probably owned by another user.",
    "F0301 Internal error when accessing libtpu multi-process lockfile.",
    "TPU initialization failed: open(/dev/vfio/1): Device or resource busy",
    "TPU initialization failed: open(/dev/accel3): Device or resource busy",
    "Failed to open: open(/dev/accel0): Operation not permitted",
]


@pytest.mark.parametrize("line", BUSY_LINES)
def test_every_busy_message_classified(line: str) -> None:
    text = f'Traceback (most recent call last):\n  File "train.py"\n  {line}  \nbye\n'
    assert tpu_busy_message(text) == line.strip()


def test_each_busy_pattern_matches_some_message() -> None:
    for pattern in BUSY_TPU_PATTERNS:
        assert any(pattern.search(line) for line in BUSY_LINES), pattern.pattern


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Traceback...\nValueError: loss is nan\n",
        "Unable to initialize backend 'cuda'",
        "open(/dev/null): Device or resource busy",
        # JAX wraps every TPU start-up failure in this: a version mismatch, a wrong
        # image, refused bounds, TPU_LOAD_LIBRARY=0. It does not say "busy".
        "RuntimeError: Unable to initialize backend 'tpu': INTERNAL: something",
    ],
)
def test_ordinary_failures_are_not_busy(text: str) -> None:
    assert tpu_busy_message(text) is None


def test_a_backend_failure_is_a_start_up_failure_with_the_runtimes_words_and_a_hint() -> None:
    text = ("Traceback (most recent call last):\n  File \"train.py\", line 3\n"
            "RuntimeError: Unable to initialize backend 'tpu': FAILED_PRECONDITION: "
            "Unexpected PJRT_Api size: expected 120, got 112\n")
    failed = startup_failure(text)
    assert failed is not None and not failed.busy
    assert failed.message == "FAILED_PRECONDITION: Unexpected PJRT_Api size: expected 120, got 112"
    assert "pip install -U 'jax[tpu]'" in failed.hint and "versions do not match" in failed.hint


def test_a_busy_line_is_a_busy_start_up_failure() -> None:
    failed = startup_failure("E0301 TPU initialization failed: open(/dev/vfio/1): "
                             "Device or resource busy\nRuntimeError: Unable to initialize "
                             "backend 'tpu': INTERNAL: TPU initialization failed\n")
    assert failed is not None and failed.busy
    assert "Device or resource busy" in failed.message


def test_an_early_backend_line_in_a_job_that_ran_on_is_not_a_start_up_failure() -> None:
    """JAX logs "Unable to initialize backend" and falls back to the CPU when the
    platform is not forced: a job that then runs and fails later failed on its own."""
    text = "Unable to initialize backend 'tpu': NOT_FOUND\n" + "step\n" * 500 + \
        "ValueError: loss is nan\n"
    assert startup_failure(text) is None
    assert startup_failure("Traceback\nValueError: loss is nan\n") is None


def test_read_tail_returns_whole_lines_from_the_end(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    log.write_bytes(b"first line\nsecond line\nthird\n")
    assert read_tail(str(log)) == "first line\nsecond line\nthird\n"
    assert read_tail(str(log), max_bytes=14) == "third\n"


def test_read_tail_missing_or_undecodable(tmp_path: Path) -> None:
    assert read_tail(str(tmp_path / "missing")) == ""
    log = tmp_path / "bin.log"
    log.write_bytes(b"\xff\xfeok\n")
    assert read_tail(str(log)) == "\ufffd\ufffdok\n"


def test_an_end_under_a_platform_notice_is_a_preemption_whatever_the_exit() -> None:
    from tpuq.agent.attempts.outcome import under_notice
    from tpuq.state.attempts import Ending
    from tpuq.state.states import Outcome

    for outcome, code, sig in ((Outcome.SUCCEEDED, 0, None), (Outcome.FAILED, None, 15),
                               (Outcome.REQUEUED, 75, None)):
        end = under_notice(Ending(outcome, "x", code, sig), "instance preempted")
        assert end.outcome is Outcome.PREEMPTED and "instance preempted" in end.reason
        assert (end.exit_code, end.exit_signal) == (code, sig)
    kept = Ending(Outcome.HOST_ERROR, "TPU did not start")
    assert under_notice(kept, "instance preempted") is kept
    done = Ending(Outcome.SUCCEEDED, "exited 0", 0)
    assert under_notice(done, None) is done
