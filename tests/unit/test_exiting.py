"""`holders.exiting`: a process whose every thread has begun its exit (status set, not yet
a zombie) is not reached by a stop signal, and the keeper does not count one sent then
(a job that finished its work at that moment is not preempted and run again). Read from
each thread's /proc stat flags (proc(5): field 9, PF_EXITING = 0x4)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tpuq.agent.tpu import holders

PF_EXITING = 0x4


def _fake_task(proc: Path, pid: int, tid: int, flags: int, state: str = "R") -> None:
    # pid (comm) state ppid pgrp session tty_nr tpgid flags ...: 52 fields in all
    fields = [str(tid), "(python3 a) b)", state, "1", str(pid), str(pid), "0", "-1",
              str(flags)] + ["0"] * 43
    path = proc / str(pid) / "task" / str(tid)
    path.mkdir(parents=True)
    (path / "stat").write_text(" ".join(fields) + "\n")


def test_a_process_is_exiting_only_when_every_thread_is(tmp_path: Path) -> None:
    _fake_task(tmp_path, 10, 10, PF_EXITING | 0x400000)
    _fake_task(tmp_path, 10, 11, PF_EXITING)
    assert holders.exiting(10, str(tmp_path))
    _fake_task(tmp_path, 20, 20, PF_EXITING, state="Z")  # its first thread ended...
    _fake_task(tmp_path, 20, 21, 0x400040)  # ...another runs on
    assert not holders.exiting(20, str(tmp_path))
    (tmp_path / "30" / "task").mkdir(parents=True)
    assert not holders.exiting(30, str(tmp_path)), "no thread listed: not known to exit"
    assert not holders.exiting(40, str(tmp_path)), "gone"


def test_a_running_process_is_not_exiting_nor_one_whose_first_thread_ended() -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    # the main thread ends (pthread_exit) while another sleeps: the kernel keeps the
    # first thread as a zombie with PF_EXITING, and the process runs on
    code = ("import ctypes, threading, time\n"
            "threading.Thread(target=time.sleep, args=(30,)).start()\n"
            "print('ready', flush=True)\n"
            "ctypes.CDLL(None).pthread_exit(None)\n")
    half = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert half.stdout is not None and half.stdout.readline() == "ready\n"
        assert not holders.exiting(sleeper.pid)
        leader = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the main thread's exit follows its print
            leader = holders._stat_fields(half.pid, "/proc")
            if leader is not None and int(leader[6]) & PF_EXITING:
                break
            time.sleep(0.005)  # polled: no event tells of a thread's exit
        assert leader is not None and int(leader[6]) & PF_EXITING, "the first thread exited"
        assert half.poll() is None, "the process runs on"
        assert not holders.exiting(half.pid), "a thread still runs: a signal still reaches it"
    finally:
        for p in (sleeper, half):
            p.kill()
            p.wait()
