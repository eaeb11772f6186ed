"""The device watch: a scan may be skipped only while every open since a clean scan has
been closed again, whoever opened the device."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpuq.agent.tpu.devwatch import DeviceWatch

HOLD = "import sys\nf = open(sys.argv[1])\nprint('ready', flush=True)\nsys.stdin.read()\n"


@pytest.fixture
def dev(tmp_path: Path) -> tuple[str, str]:
    paths = []
    for name in ("accel0", "accel1"):
        (tmp_path / name).touch()
        paths.append(str(tmp_path / name))
    return paths[0], paths[1]


@pytest.fixture
def watch(dev):
    w = DeviceWatch(dev)
    assert w.active, "inotify is available on Linux"
    yield w
    w.close()


def clean_scan(watch: DeviceWatch, *paths: str) -> None:
    watch.scan_starts(paths)
    watch.scan_found_free(paths)


def hold(path: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLD, path], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "ready\n"
    return p


def release(p: subprocess.Popen[str]) -> None:
    assert p.stdin is not None and p.stdout is not None
    p.stdin.close()
    p.stdout.close()
    assert p.wait(10) == 0


def test_never_quiet_before_a_scan(watch, dev):
    assert not watch.quiet(dev)


def test_quiet_after_a_clean_scan_and_after_open_then_close(watch, dev):
    clean_scan(watch, *dev)
    assert watch.quiet(dev)
    p = hold(dev[0])
    try:
        assert not watch.quiet([dev[0]]), "someone holds accel0 now"
        assert watch.quiet([dev[1]]), "accel1 was not touched"
    finally:
        release(p)
    assert watch.quiet(dev), "the open was closed again: nobody holds it"


def test_a_holder_the_scan_did_not_count_forces_a_scan(watch, dev):
    p = hold(dev[0])  # say the scan excluded this process: its close is unmatched
    clean_scan(watch, dev[0])
    release(p)
    q = hold(dev[0])  # a new open brings the count back to zero, but it is a holder
    try:
        assert not watch.quiet([dev[0]])
    finally:
        release(q)


def test_an_open_during_the_scan_is_counted(watch, dev):
    watch.scan_starts([dev[0]])
    p = hold(dev[0])  # the scan missed it (it had already passed this pid)
    try:
        watch.scan_found_free([dev[0]])
        assert not watch.quiet([dev[0]])
    finally:
        release(p)


def test_a_removed_device_is_never_quiet_again(watch, dev):
    clean_scan(watch, *dev)
    os.unlink(dev[1])
    assert not watch.quiet([dev[1]])
    assert watch.quiet([dev[0]])


def test_unwatchable_paths_are_never_quiet(tmp_path):
    w = DeviceWatch([str(tmp_path / "missing")])
    try:
        assert not w.active
        clean_scan(w, str(tmp_path / "missing"))
        assert not w.quiet([str(tmp_path / "missing")])
    finally:
        w.close()


def test_a_clean_scan_is_trusted_only_for_a_short_period(dev):
    """A container's own device node (another inode, same device) opens the chip without
    an inotify event on ours: a scan's "free" must expire."""
    now = [100.0]
    w = DeviceWatch(dev, trust_s=10.0, clock=lambda: now[0])
    try:
        clean_scan(w, *dev)
        now[0] += 9.0
        assert w.quiet(dev)
        now[0] += 2.0
        assert not w.quiet(dev), "a scan older than trust_s is not trusted"
        clean_scan(w, *dev)
        assert w.quiet(dev)
    finally:
        w.close()


def test_a_busy_ending_forgets_every_clean_scan(watch, dev):
    clean_scan(watch, *dev)
    assert watch.quiet(dev)
    watch.distrust()
    assert not watch.quiet(dev) and not watch.quiet([dev[0]])
