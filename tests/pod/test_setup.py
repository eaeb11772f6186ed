"""`tpuq pod setup`: the deployment kit on every worker, the database once; run twice,
the second run changes nothing.

The workers' own startup script (workers/startup-script.sh) runs for real on each, in
the worker's mount namespace, with pip, systemctl and apt-get as shims (no systemd, no
package index here); `tpuq db upgrade` runs for real against PostgreSQL.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.harness import ROOT
from tests.pod.fakepod import FakePod
from tests.services import _admin, drop_pg_database

SPEC = "tpuq @ file:///srv/wheels/tpuq-0.1.0-py3-none-any.whl"
BROKER = "redis://10.0.0.2:6379/0"

pytestmark = [pytest.mark.pod, pytest.mark.team]  # and PostgreSQL


def setup(pod: FakePod, *args: str) -> dict[tuple[str, str], dict[str, object]]:
    r = pod.tpuq("pod", "setup", "--hosts", str(pod.hosts_file()), "--pip-spec", SPEC,
                 "--json", *args, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return {(s["name"], s["step"]): s for s in json.loads(r.stdout)}


def env_file(text: str | None) -> dict[str, str]:
    assert text is not None, "no /etc/tpuq/agent.env"
    return dict(ln.split("=", 1) for ln in text.splitlines() if ln and not ln.startswith("#"))


def test_setup_installs_every_worker_and_a_second_run_changes_nothing(
        fake_pod: FakePod, pg_url: str) -> None:
    machine_had_it = Path("/etc/tpuq/agent.env").exists()
    steps = setup(fake_pod, "--database-url", pg_url, "--broker-url", BROKER)
    assert set(steps) == {("w0", "agent"), ("w1", "agent"), ("w2", "agent"), ("w0", "database")}
    for w in fake_pod.workers:
        step = steps[(f"w{w.index}", "agent")]
        assert {f"pip install {SPEC}", "set TPUQ_DATABASE_URL", "set TPUQ_BROKER_URL",
                "set TPUQ_HOST", "started tpuq-agent"} <= set(step["changes"])  # type: ignore[arg-type]
        # named <TPU node>-w<worker> from the worker's own metadata
        assert step["detail"] == f"pod-test-w{w.index}: active"
        env = env_file(w.read("/etc/tpuq/agent.env"))
        assert env["TPUQ_DATABASE_URL"] == pg_url and env["TPUQ_BROKER_URL"] == BROKER
        assert env["TPUQ_HOST"] == f"pod-test-w{w.index}"
        assert "ExecStart=/opt/tpuq/venv/bin/tpuq agent" in (
            w.read("/etc/systemd/system/tpuq-agent.service") or "")
        assert "systemctl enable --now tpuq-agent.service" in w.shim_calls()
    assert steps[("w0", "database")]["changes"] == [
        f"upgraded the schema empty -> {steps[('w0', 'database')]['detail'].split()[-1]}"]  # type: ignore[union-attr]
    # each worker's files are its own (mount namespaces), and never the machine's
    assert Path("/etc/tpuq/agent.env").exists() == machine_had_it

    before = {w.index: (w.mtime("/etc/tpuq/agent.env"), len(w.shim_calls()))
              for w in fake_pod.workers}
    again = setup(fake_pod, "--database-url", pg_url, "--broker-url", BROKER)
    assert all(s["changes"] == [] for s in again.values()), again
    for w in fake_pod.workers:
        mtime, calls = before[w.index]
        assert w.mtime("/etc/tpuq/agent.env") == mtime
        new_calls = w.shim_calls()[calls:]
        assert not any(re.match(r"(pip|apt-get|python3) |systemctl (kill|restart|start)", c)
                       for c in new_calls), new_calls
    r = fake_pod.tpuq("pod", "setup", "--hosts", str(fake_pod.hosts_file()), "--pip-spec", SPEC,
                      "--database-url", pg_url, "--broker-url", BROKER)
    assert r.returncode == 0
    assert r.stdout.count("nothing to change") == 4, r.stdout


@pytest.fixture
def db_name() -> object:
    name = f"tpuq_pod_{secrets.token_hex(4)}"
    yield name
    drop_pg_database(f"postgresql:///{name}")
    _admin(f'DROP ROLE IF EXISTS "{name}"')


def test_setup_runs_redis_and_postgresql_on_host_0(fake_pod: FakePod, db_name: str) -> None:
    """No URLs given: host 0 gets Redis and PostgreSQL (its configuration in w0's own
    /etc, its role and database real), the workers their URLs; again: nothing."""
    steps = setup(fake_pod, "--db-name", db_name, "--host-prefix", "slice")
    services = steps[("w0", "services")]
    assert {"started redis-server", f"created role {db_name}",
            f"created database {db_name}"} <= set(services["changes"])  # type: ignore[arg-type]
    w0 = fake_pod.workers[0]
    assert "bind 127.0.0.1 127.0.0.1" in (w0.read("/etc/redis/tpuq.conf") or "")
    hba = w0.read(f"/etc/postgresql/{_pg_version()}/main/pg_hba.conf") or ""
    assert f"host {db_name} {db_name} 127.0.0.3/32 scram-sha-256" in hba
    env = env_file(fake_pod.workers[2].read("/etc/tpuq/agent.env"))
    assert env["TPUQ_HOST"] == "slice-w2"
    assert re.fullmatch(rf"postgresql://{db_name}:[0-9a-f]{{32}}@127\.0\.0\.1:5432/{db_name}",
                        env["TPUQ_DATABASE_URL"])
    assert re.fullmatch(r"redis://:[0-9a-f]{32}@127\.0\.0\.1:6379/0", env["TPUQ_BROKER_URL"])
    assert steps[("w0", "database")]["changes"], "the new database was upgraded"

    again = setup(fake_pod, "--db-name", db_name, "--host-prefix", "slice")
    assert all(s["changes"] == [] for s in again.values()), again
    assert env_file(fake_pod.workers[2].read("/etc/tpuq/agent.env")) == env


def test_the_packaged_startup_script_is_the_kits_and_services_sh_is_clean() -> None:
    from tpuq.pod import provision

    assert provision.STARTUP_SCRIPT.resolve() == (ROOT / "workers" / "startup-script.sh").resolve()
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (.ci/run installs it)")
    r = subprocess.run(["shellcheck", str(provision.SERVICES_SCRIPT)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout


def _pg_version() -> str:
    return sorted(p.name for p in Path("/etc/postgresql").iterdir())[-1]
