"""An earlier release of tpuq, installed from its commit into a virtualenv of its own, for
tests that run it beside today's code (tests/e2e/test_upgrade.py).

Built once per machine (about 30 s: `git archive` of the commit, then `pip install`
from the package index this machine is set up with) under $TPUQ_TEST_CACHE, else
~/.cache/tpuq-tests, and reused by every later session. The commit must be in the
repository the tests run from: a shallow clone fails here, saying so.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

# the previous release: schema 0011 (migrations 0001-0011)
PREVIOUS = "f0adb75"
PREVIOUS_SCHEMA = "0011"
REPO = Path(__file__).resolve().parents[1]


def cache_dir() -> Path:
    return Path(os.environ.get("TPUQ_TEST_CACHE", Path.home() / ".cache" / "tpuq-tests"))


def install(commit: str = PREVIOUS) -> list[str]:
    """The release's `tpuq` command (its virtualenv's console script: run from anywhere,
    it imports that release, never this checkout)."""
    home = cache_dir() / f"release-{commit}"
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"release-{commit}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be building it
        if not (home / "done").exists():
            shutil.rmtree(home, ignore_errors=True)  # a build that died halfway
            home.mkdir()
            _build(commit, home)
            (home / "done").write_text(commit + "\n")
    return [str(home / "venv" / "bin" / "tpuq")]


def _build(commit: str, into: Path) -> None:
    src = into / "src"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True)
    if archive.returncode != 0:
        raise RuntimeError(f"cannot read release {commit} from {REPO} (a shallow clone?): "
                           f"{archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    subprocess.run([sys.executable, "-m", "venv", str(into / "venv")], check=True)
    subprocess.run([str(into / "venv" / "bin" / "pip"), "install", "-q", str(src)], check=True,
                   capture_output=True)
