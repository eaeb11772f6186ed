"""Where a root agent running jobs as their owners may hand files out (identity.private_dir)."""

from __future__ import annotations

from pathlib import Path

from tpuq.agent.attempts.identity import in_dir, private_dir


def test_a_directory_of_the_agents_own_is_private(tmp_path: Path) -> None:
    assert private_dir(str(tmp_path / "made" / "here")) is None
    assert (tmp_path / "made" / "here").is_dir()


def test_a_directory_others_may_write_is_not(tmp_path: Path) -> None:
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o777)
    assert "writable by nobody else" in (private_dir(str(d)) or "")


def test_a_symlink_to_a_directory_is_not(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert "is not a directory" in (private_dir(str(tmp_path / "link")) or "")


def test_the_job_enters_its_directory_through_env_after_the_drop() -> None:
    argv = in_dir("/home/alice/proj", ["python", "train.py", "--lr", "3e-4"])
    assert argv[1:] == ["-C", "/home/alice/proj", "--", "python", "train.py", "--lr", "3e-4"]
