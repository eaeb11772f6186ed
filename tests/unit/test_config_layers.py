"""Configuration layers: defaults < the system's file < the user's file < environment,
each value's source recorded; a config file is hostile input (one line per fault)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpuq.settings import SettingsError, load, load_with_sources


def env(tmp_path: Path, **more: str) -> dict[str, str]:
    return {"TPUQ_SYSTEM_CONFIG": str(tmp_path / "etc.toml"), "HOME": str(tmp_path / "h"),
            "XDG_DATA_HOME": str(tmp_path / "xdg"), **more}


def test_each_layer_overrides_the_one_before_and_says_so(tmp_path):
    (tmp_path / "etc.toml").write_text(
        f'home = "{tmp_path}/shared"\nteam = "vision"\npoll_s = 3\nlease_s = 40\n')
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "config.toml").write_text('team = "nlp"\npoll_s = 4\n')
    cfg, src = load_with_sources(env(tmp_path, TPUQ_POLL_S="5"))
    assert cfg.home == f"{tmp_path}/shared", "the system file sets TPUQ_HOME for everyone"
    assert (cfg.team, cfg.poll_s, cfg.lease_s) == ("nlp", 5.0, 40.0)
    assert src["home"] == src["lease_s"] == str(tmp_path / "etc.toml")
    assert src["team"] == str(tmp_path / "shared" / "config.toml")
    assert src["poll_s"] == "TPUQ_POLL_S" and src["heartbeat_s"] == "default"


def test_the_users_home_and_config_win_over_the_systems(tmp_path):
    (tmp_path / "etc.toml").write_text(f'home = "{tmp_path}/shared"\nteam = "vision"\n')
    mine = tmp_path / "mine.toml"
    mine.write_text('team = "solo"\n')
    cfg, src = load_with_sources(env(tmp_path, TPUQ_HOME=str(tmp_path / "own"),
                                     TPUQ_CONFIG=str(mine)))
    assert cfg.home == str(tmp_path / "own") and src["home"] == "TPUQ_HOME"
    assert cfg.team == "solo" and src["team"] == str(mine)


def test_without_a_system_file_nothing_changes(tmp_path):
    cfg, src = load_with_sources(env(tmp_path, TPUQ_HOME=str(tmp_path / "q")))
    assert set(src.values()) == {"default", "TPUQ_HOME"} and cfg.team == "default"


@pytest.mark.parametrize("text, says", [
    ("home = [unclosed\n", "cannot read config file"),
    ("hoem = '/srv'\n", "unknown setting 'hoem' (did you mean 'home'?)"),
    ("zzz = 1\n", "unknown setting 'zzz' (`tpuq config` lists the settings)"),
    ("[home]\nx = 1\n", "home must be text or a number"),
    ("poll_s = true\n", "poll_s must be text or a number"),
    ("team = ['a', 'b']\n", "team must be text or a number"),
    ("poll_s = 'soon'\n", "poll_s must be a number"),
    ("run_as = 'root'\n", "run_as must be 'agent' or 'owner'"),
])
def test_a_bad_system_file_is_one_line_naming_it(tmp_path, text, says):
    (tmp_path / "etc.toml").write_text(text)
    with pytest.raises(SettingsError) as e:
        load(env(tmp_path))
    assert says in str(e.value) and str(tmp_path / "etc.toml") in str(e.value)
    assert "\n" not in str(e.value)


def test_a_binary_system_file_is_one_line(tmp_path):
    (tmp_path / "etc.toml").write_bytes(b"\xff\xfe\x00junk")
    with pytest.raises(SettingsError, match="not UTF-8"):
        load(env(tmp_path))


def test_paths_left_empty_show_what_is_in_effect(tmp_path):
    cfg = load(env(tmp_path, TPUQ_HOME="/srv/q"))
    shown = cfg.in_effect()
    assert shown["lock_dir"] == "/srv/q/locks" and shown["agent_socket"] == "/srv/q/agent.sock"
    assert shown["database_url"] == "sqlite:////srv/q/tpuq.db (embedded)"
