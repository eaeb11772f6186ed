"""Agent notes in a shared directory (tpuq/announce.py): a live agent's note is found
and named; a dead one's, or anything else a stranger left there, is not."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tpuq import announce
from tpuq.settings import load


def settings(tmp_path: Path, home: str):  # type: ignore[no-untyped-def]
    return load({"TPUQ_HOME": str(tmp_path / home), "TPUQ_ANNOUNCE_DIR": str(tmp_path / "run"),
                 "TPUQ_SYSTEM_CONFIG": "/nonexistent/etc.toml"})


@pytest.fixture
def served(tmp_path: Path):  # type: ignore[no-untyped-def]
    """An agent's settings whose socket is bound (its pid: this process)."""
    (tmp_path / "run").mkdir()
    cfg = settings(tmp_path, "shared")
    Path(cfg.home).mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(cfg.socket_path)
    yield cfg
    sock.close()


def test_a_running_agents_note_names_its_home_to_others(tmp_path, served):
    path = announce.publish(served)
    assert path is not None and oct(path.stat().st_mode & 0o777) == "0o644"
    mine = settings(tmp_path, "personal")
    said = announce.hint(mine)
    assert said is not None and f"TPUQ_HOME={served.home}" in said
    assert announce.hint(served) is None, "its own users need no hint"
    assert [n["home"] for n in announce.others(served, include_own=True)] == [served.home]
    announce.withdraw(path)
    assert not path.exists() and announce.hint(mine) is None


def test_a_dead_agents_note_is_ignored(tmp_path, served):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    note = {"home": served.home, "socket": served.socket_path, "deployment": "x",
            "host": "h", "pid": int(dead)}
    (tmp_path / "run" / "agent-dead.json").write_text(json.dumps(note))
    assert announce.hint(settings(tmp_path, "personal")) is None


@pytest.mark.parametrize("content", [
    b"not json", b"[]", b'{"home": 1}', b"{" * 5000,
    b'{"home": "/h", "socket": "/s", "deployment": "d", "host": "h", "pid": true}',
])
def test_what_a_stranger_leaves_there_is_ignored(tmp_path, served, content):
    (tmp_path / "run" / "agent-x.json").write_bytes(content)
    assert announce.others(settings(tmp_path, "personal")) == []


def test_a_link_or_a_control_character_cannot_mislead(tmp_path, served):
    note = {"home": "/srv/q\x1b[2J", "socket": served.socket_path, "deployment": "d",
            "host": "h", "pid": os.getpid()}
    (tmp_path / "elsewhere.json").write_text(json.dumps(note))
    (tmp_path / "run" / "agent-link.json").symlink_to(tmp_path / "elsewhere.json")
    assert announce.others(settings(tmp_path, "personal")) == []
    (tmp_path / "run" / "agent-ctl.json").write_text(json.dumps(note))
    said = announce.hint(settings(tmp_path, "personal"))
    assert said is not None and "\x1b" not in said and "/srv/q?[2J" in said


def test_a_root_agent_makes_the_directory_as_tmp_is_made(tmp_path):
    """Sticky and world-writable, so anyone's agent may leave a note and nobody may
    remove another's; any other account announces nothing without it."""
    cfg = settings(tmp_path, "shared")
    path = announce.publish(cfg)
    if os.geteuid() == 0:
        assert path is not None and oct(path.parent.stat().st_mode & 0o7777) == "0o1777"
    else:
        assert path is None and not (tmp_path / "run").exists()


def test_no_directory_setting_no_note(tmp_path):
    (tmp_path / "etc.toml").write_text('announce_dir = ""\n')
    cfg = load({"TPUQ_HOME": str(tmp_path), "TPUQ_SYSTEM_CONFIG": str(tmp_path / "etc.toml")})
    assert cfg.announce_dir == ""
    assert announce.publish(cfg) is None and announce.others(cfg) == []
