"""Where a job's checkpoints live (tpuq/checkpoints.py): one rule for the scheduler, which
records it, and the agents, which make the directory."""

from __future__ import annotations

import pytest

from tpuq import checkpoints
from tpuq.agent.attempts.workdirs import WorkDirs
from tpuq.checkpoints import Placement
from tpuq.settings import Settings, SettingsError, load

INSTANCE = "0a1b2c3d4e5f67"  # a database's random id (only its first 12 are used)
NONE = (None, None, False)  # a job's first attempt: no directory yet


def test_a_shared_root_gives_every_attempt_on_every_host_the_same_directory() -> None:
    first = checkpoints.placed("/nfs/ckpt", "/home/a", INSTANCE, 12, 1, "tpu-a", NONE)
    assert first == Placement("/nfs/ckpt/0a1b2c3d4e5f/12", None, None, True)
    again = checkpoints.placed("/nfs/ckpt", "/home/b", INSTANCE, 12, 2, "tpu-b",
                               (first.dir, first.host, True))
    assert again == Placement(first.dir, None, None, False), \
        "another host, TPUQ_HOME: the same"


def test_a_bucket_root_is_a_url_joined_as_a_url() -> None:
    where = checkpoints.placed("gs://bkt/runs/", "/home/a", INSTANCE, 7, 1, "tpu-a", NONE)
    assert where == Placement("gs://bkt/runs/0a1b2c3d4e5f/7", None, None, True)


def test_host_local_checkpoints_stay_on_their_host_and_a_move_starts_over() -> None:
    first = checkpoints.placed(None, "/home/a", INSTANCE, 12, 1, "tpu-b", NONE)
    assert first == Placement("/home/a/checkpoints/0a1b2c3d4e5f/12", "tpu-b", None, True)
    back = checkpoints.placed(None, "/home/a", INSTANCE, 12, 2, "tpu-b", (first.dir, first.host, True))
    assert back == first.replace(fresh=False), "its host again: the same directory"
    moved = checkpoints.placed(None, "/home/x", INSTANCE, 12, 3, "tpu-a", (first.dir, first.host, True))
    assert moved == Placement("/home/x/checkpoints/0a1b2c3d4e5f/12.3", "tpu-a",
                              "checkpoint on tpu-b not reachable from tpu-a: starting over", True)
    home_again = checkpoints.placed(None, "/home/a", INSTANCE, 12, 4, "tpu-b",
                                    (moved.dir, moved.host, True))
    assert home_again.dir.endswith("/12.4") and home_again.started_over, \
        "never the directory an earlier stay on that host left behind"
    empty = checkpoints.placed(None, "/home/x", INSTANCE, 12, 3, "tpu-a", (first.dir, first.host, False))
    assert empty.started_over is None, "nothing was seen there: nothing is lost by moving"


def test_a_shared_root_changed_under_a_job_is_a_move() -> None:
    before = ("/nfs/old/0a1b2c3d4e5f/12", None, True)
    now = checkpoints.placed("/nfs/new", "/h", INSTANCE, 12, 2, "tpu-a", before)
    assert now.started_over == ("checkpoint in /nfs/old/0a1b2c3d4e5f/12 not reachable "
                                "from tpu-a: starting over")
    local = checkpoints.placed(None, "/h", INSTANCE, 12, 2, "tpu-a", before)
    assert local.host == "tpu-a" and local.started_over is not None


@pytest.mark.parametrize(("root", "bad"), [
    ("", False), ("/mnt/nfs/ckpt", False), ("gs://bucket", False), ("gs://b/x/y", False),
    ("gs://", True), ("relative/dir", True), ("s3://bucket/x", True), ("file:///x", True),
])
def test_a_root_is_an_absolute_path_or_a_bucket_url(root: str, bad: bool) -> None:
    assert (checkpoints.check_root(root) is not None) == bad
    env = {"TPUQ_HOME": "/tmp/h", "TPUQ_CONFIG": "/nonexistent", "TPUQ_CHECKPOINT_ROOT": root}
    if bad:
        with pytest.raises(SettingsError, match="TPUQ_CHECKPOINT_ROOT"):
            load(env)
    else:
        assert load(env).checkpoint_root == root


def test_an_agent_makes_a_recorded_directory_under_its_own_base_only(tmp_path) -> None:
    """The database says which directory (the job's, or `<job>.<attempt>` after a move);
    never where on this host's disk."""
    dirs = WorkDirs(str(tmp_path / "logs"), str(tmp_path / "home"), "", INSTANCE)
    base = tmp_path / "home" / "checkpoints" / "0a1b2c3d4e5f"
    assert dirs.checkpoint_dir(12, None) == str(base / "12")
    assert dirs.checkpoint_dir(12, "/elsewhere/0a1b2c3d4e5f/12.3") == str(base / "12.3")
    assert dirs.checkpoint_dir(12, "/etc") == str(base / "12")
    assert dirs.checkpoint_dir(12, "/x/13") == str(base / "12"), "another job's: not taken"
    for odd in ("/x/112", "/x/012", "/x/12.", "/x/12.3.4", "/x/12.a", "/x/12.\u0663", "/x/.."):
        assert dirs.checkpoint_dir(12, odd) == str(base / "12"), odd
    assert dirs.checkpoint_dir(7, "/x/7.10") == str(base / "7.10")
    shared = WorkDirs(str(tmp_path / "logs"), str(tmp_path / "home"), "gs://b/r", INSTANCE)
    assert shared.checkpoint_dir(12, "gs://b/r/0a1b2c3d4e5f/12") == "gs://b/r/0a1b2c3d4e5f/12"
    assert shared.make_checkpoint_dir(12, 1) == "gs://b/r/0a1b2c3d4e5f/12"
    assert not (tmp_path / "gs:").exists()


def test_the_default_is_host_local() -> None:
    assert Settings().checkpoint_root == ""
    assert checkpoints.base(None, "/h", INSTANCE) == "/h/checkpoints/0a1b2c3d4e5f"


def test_a_directory_holds_something_once_it_has_an_entry(tmp_path) -> None:
    assert not checkpoints.has_content(str(tmp_path / "missing"))
    assert not checkpoints.has_content(str(tmp_path))
    (tmp_path / "state.npz").write_bytes(b"x")
    assert checkpoints.has_content(str(tmp_path))
