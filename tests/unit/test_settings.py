"""Settings: which deployment a configuration names (the agent socket's guard)."""

from __future__ import annotations

import pathlib

import pytest

from tpuq import settings
from tpuq.agent.attempts import identity
from tpuq.settings import SettingsError, load


def deployment(**env: str) -> str:
    return load({"TPUQ_HOME": "/srv/tpuq", **env}).deployment


def test_the_same_database_is_the_same_deployment_whoever_logs_in():
    a = deployment(TPUQ_DATABASE_URL="postgresql://alice:secret@DB.lab:5432/tpuq")
    b = deployment(TPUQ_DATABASE_URL="postgresql+psycopg://bob@db.lab:5432/tpuq")
    assert a == b == "postgresql://db.lab:5432/tpuq"
    assert "secret" not in a


def test_another_server_port_or_database_is_another_deployment():
    base = deployment(TPUQ_DATABASE_URL="postgresql://db.lab:5432/tpuq")
    for other in ("postgresql://db2.lab:5432/tpuq", "postgresql://db.lab:5433/tpuq",
                  "postgresql://db.lab:5432/tpuq2"):
        assert deployment(TPUQ_DATABASE_URL=other) != base


def test_embedded_deployment_is_the_sqlite_file_under_home():
    assert deployment() == "sqlite:/srv/tpuq/tpuq.db"
    assert deployment() != load({"TPUQ_HOME": "/srv/other"}).deployment
    assert deployment() != deployment(TPUQ_DATABASE_URL="postgresql://db.lab/tpuq")


@pytest.mark.parametrize("home", ["/srv/tpuq", "rel/home", "", "/with space/x ", "/a?b",
                                  "/a#b", "/tab\there", "/new\nline", "/%41/100%",
                                  "//net/share", "/a/../b/./c", "~/x", "/ünï/cödé"])
def test_the_embedded_default_names_the_deployment_as_its_url_does(home, tmp_path,
                                                                   monkeypatch):
    """The default database's deployment, worked out without urllib, is what the agent
    and earlier releases read of its URL."""
    monkeypatch.chdir(tmp_path)  # a relative home is under the working directory
    got = settings.Settings(home=home)
    told = settings.Settings(home=home, database_url=got.db_url)
    assert got.deployment == told.deployment


def test_agent_socket_defaults_under_home_and_can_be_moved():
    assert load({"TPUQ_HOME": "/srv/tpuq"}).socket_path == "/srv/tpuq/agent.sock"
    moved = load({"TPUQ_HOME": "/srv/tpuq", "TPUQ_AGENT_SOCKET": "/run/tpuq.sock"})
    assert moved.socket_path == "/run/tpuq.sock"


def test_postgres_default_port_is_the_same_deployment_as_5432():
    assert deployment(TPUQ_DATABASE_URL="postgresql://db.lab/tpuq") == \
        deployment(TPUQ_DATABASE_URL="postgresql://db.lab:5432/tpuq")


def test_a_shell_naming_only_the_socket_takes_the_agents_deployment():
    assert load({"TPUQ_HOME": "/h", "TPUQ_AGENT_SOCKET": "/run/a.sock"}).socket_deployment is None
    team = load({"TPUQ_DATABASE_URL": "postgresql://db/t", "TPUQ_AGENT_SOCKET": "/run/a.sock"})
    assert team.socket_deployment == team.deployment
    assert load({"TPUQ_HOME": "/h"}).socket_deployment == "sqlite:/h/tpuq.db"


def test_run_as_takes_agent_or_owner_and_names_the_source_otherwise():
    assert load({"TPUQ_HOME": "/h"}).run_as == "agent"
    assert load({"TPUQ_HOME": "/h", "TPUQ_RUN_AS": "owner"}).run_as == "owner"
    with pytest.raises(SettingsError, match="TPUQ_RUN_AS: run_as must be 'agent' or 'owner'"):
        load({"TPUQ_HOME": "/h", "TPUQ_RUN_AS": "alice"})


def test_only_a_root_agent_may_run_jobs_as_their_owners(monkeypatch):
    monkeypatch.setattr(identity.os, "geteuid", lambda: 1000)
    assert "needs the agent to run as root" in (identity.check_agent_can("owner") or "")
    assert identity.check_agent_can("agent") is None
    monkeypatch.setattr(identity.os, "geteuid", lambda: 0)
    assert identity.check_agent_can("owner") is None


def test_a_config_file_in_a_closed_directory_is_a_clear_error(tmp_path, monkeypatch):
    # root searches any directory: the kernel's answer to another user is stood in for
    real_stat = settings.os.stat

    def closed(path, *args, **kwargs):
        if str(path).endswith("config.toml"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(settings.os, "stat", closed)
    with pytest.raises(SettingsError, match="cannot read config file .*Permission denied"):
        load({"TPUQ_HOME": str(tmp_path)})


def test_is_file_answers_as_pathlib_does(tmp_path):
    regular = tmp_path / "config.toml"
    regular.write_text("")
    for path in (regular, tmp_path, tmp_path / "missing", regular / "under-a-file",
                 tmp_path / "nul\0"):
        assert settings.is_file(str(path)) == pathlib.Path(path).is_file(), path
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert settings.is_file(str(loop)) is False


def test_notify_defaults_come_from_the_config_file_a_list_of_urls_included(tmp_path):
    from tpuq.settings import SettingsError, load

    (tmp_path / "config.toml").write_text(
        'notify = "fail,preempt"\nnotify_to = ["mailto://a:b@example.org", "json://h/p"]\n'
        "notify_tries = 0\n")
    with pytest.raises(SettingsError, match="TPUQ_NOTIFY_TRIES must be positive"):
        load({"TPUQ_HOME": str(tmp_path)})
    cfg = load({"TPUQ_HOME": str(tmp_path), "TPUQ_NOTIFY_TRIES": "3"})
    assert (cfg.notify, cfg.notify_tries) == ("fail,preempt", 3)
    assert cfg.notify_to == "mailto://a:b@example.org\njson://h/p"
