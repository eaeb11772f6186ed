"""tpuq.job: the helper imported by training scripts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tpuq import job

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPO = Path(__file__).resolve().parents[2]


def _child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUQ_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def test_import_is_light() -> None:
    out = subprocess.run(
        [sys.executable, str(FIXTURES / "import_light.py")],
        env=_child_env(), capture_output=True, text=True, timeout=60, check=True,
    )
    assert json.loads(out.stdout) == []


def test_checkpoint_dir_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "a" / "b"
    monkeypatch.setenv("TPUQ_CHECKPOINT_DIR", str(target))
    assert job.checkpoint_dir() == target
    assert target.is_dir()


def test_checkpoint_dir_outside_tpuq(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TPUQ_CHECKPOINT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert job.checkpoint_dir().resolve() == tmp_path / "checkpoints"
    assert (tmp_path / "checkpoints").is_dir()


def test_identity_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TPUQ_JOB_ID", "TPUQ_ATTEMPT", "TPUQ_RESUMED"):
        monkeypatch.delenv(name, raising=False)
    assert (job.job_id(), job.attempt(), job.resumed()) == (None, 1, False)
    monkeypatch.setenv("TPUQ_JOB_ID", "42")
    monkeypatch.setenv("TPUQ_ATTEMPT", "3")
    monkeypatch.setenv("TPUQ_RESUMED", "1")
    assert (job.job_id(), job.attempt(), job.resumed()) == (42, 3, True)


@pytest.mark.parametrize(("sig_env", "sig"), [(None, signal.SIGTERM), ("SIGUSR1", signal.SIGUSR1)])
def test_signal_sets_flag_and_requeue_exits_75(sig_env: str | None, sig: signal.Signals) -> None:
    env = _child_env(**({"TPUQ_PREEMPT_SIGNAL": sig_env} if sig_env else {}))
    proc = subprocess.Popen(
        [sys.executable, str(FIXTURES / "preempt_flag.py")],
        env=env, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"  # handler installed
        proc.send_signal(sig)
        assert proc.stdout.readline().strip() == "flag"
        assert proc.wait(timeout=30) == job.EX_TEMPFAIL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_checkpointed_appends_json_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    progress = tmp_path / "progress.jsonl"
    monkeypatch.setenv("TPUQ_PROGRESS_FILE", str(progress))
    job.checkpointed(10)
    job.checkpointed(20)
    lines = [json.loads(line) for line in progress.read_text().splitlines()]
    assert [entry["step"] for entry in lines] == [10, 20]
    assert all(isinstance(entry["time"], float) for entry in lines)


def test_checkpointed_without_env_is_noop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TPUQ_PROGRESS_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    job.checkpointed(5)
    assert list(tmp_path.iterdir()) == []


def test_the_job_helper_reads_exactly_the_contract_s_variables() -> None:
    """tpuq.job spells the variable names itself (it must stay import-light): they must
    be the ones tpuq/jobenv.py sets."""
    import re
    from pathlib import Path

    from tpuq import jobenv

    source = Path(job.__file__).read_text()
    assert set(re.findall(r"\bTPUQ_[A-Z_]+\b", source)) == set(jobenv.JOB_SIDE)
    from tpuq.agent import exits

    assert exits.EX_TEMPFAIL is job.EX_TEMPFAIL


def test_a_bucket_checkpoint_dir_is_passed_through_as_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gs:// root (Orbax writes it natively): the URL as given, joined with `/` as a
    path would be, and nothing made on the local disk."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TPUQ_CHECKPOINT_DIR", "gs://team-bucket/tpuq/0a1b2c3d4e5f/12")
    d = job.checkpoint_dir()
    assert d == "gs://team-bucket/tpuq/0a1b2c3d4e5f/12" and isinstance(d, str)
    assert d / "params" == "gs://team-bucket/tpuq/0a1b2c3d4e5f/12/params"
    assert os.path.join(d, "state") == "gs://team-bucket/tpuq/0a1b2c3d4e5f/12/state"
    assert list(tmp_path.iterdir()) == [], "no local directory named gs:"


def test_the_job_helper_knows_the_url_schemes_tpuq_passes_through() -> None:
    from tpuq import checkpoints

    assert job.URL_SCHEMES == checkpoints.URL_SCHEMES
