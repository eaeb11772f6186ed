"""Several people, one VM: an admin's system config file sets TPUQ_HOME once for
everyone; someone whose own settings name no running agent is told which TPUQ_HOME the
VM's agent serves (from the note it leaves in the announce directory); `tpuq config`
shows each path in effect and the agents it found. Real agents, both deployments."""

from __future__ import annotations

import json
import subprocess

from tests.harness import TPUQ


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TPUQ, *args], env=env, text=True, capture_output=True, timeout=120)


def test_the_system_file_points_everyone_at_the_vms_agent(stack, host, tmp_path):
    etc = tmp_path / "etc-config.toml"
    etc.write_text(f'home = "{stack.home}"\n')
    stack.extra["TPUQ_ANNOUNCE_DIR"] = str(tmp_path / "run")
    (tmp_path / "run").mkdir()
    stack.start_agent(host)
    env = stack.env(TPUQ_SYSTEM_CONFIG=str(etc))
    del env["TPUQ_HOME"]  # a user who set nothing
    r = run(env, "submit", "--", "true")
    assert r.returncode == 0 and "note:" not in r.stderr, r.stderr
    job_id = int(r.stdout.split()[2])
    stack.wait_state(job_id, "succeeded")
    shown = json.loads(run(env, "config", "--json").stdout)
    assert shown["home"] == {"value": str(stack.home), "source": str(etc),
                             "variable": "TPUQ_HOME"}
    assert shown["lock_dir"]["value"] == f"{stack.home}/locks"
    assert shown["lock_dir"]["source"] == "default (derived)"
    assert shown["agent_socket"]["value"] == f"{stack.home}/agent.sock"
    assert shown["config_files"]["system config"] == {"path": str(etc), "state": "read"}
    assert [a["home"] for a in shown["agents_here"]] == [str(stack.home)]
    text = run(env, "config").stdout
    assert "(none)" not in text.split("lock_dir", 1)[1].splitlines()[0]
    assert f"agent on this VM: pid {stack.agents[0].pid}" in text


def test_settings_that_name_no_agent_are_told_which_home_the_vms_agent_serves(
        stack, host, tmp_path):
    stack.extra["TPUQ_ANNOUNCE_DIR"] = str(tmp_path / "run")
    (tmp_path / "run").mkdir()
    stack.start_agent(host)
    elsewhere = tmp_path / "personal"
    if stack.deployment == "embedded":  # type: ignore[attr-defined]
        # their own empty queue, which no agent serves: queued, and told where the agent is
        r = run(stack.env(TPUQ_HOME=str(elsewhere)), "submit", "--", "true")
        assert r.returncode == 0
        r.stderr = "".join(line for line in r.stderr.splitlines(True) if line.startswith("note:"))
        assert len(r.stderr.splitlines()) == 1, "one line, and no `tpuq agent` advice"
    else:
        # a login shell naming a socket where no agent answers, and no database
        env = stack.env(TPUQ_HOME=str(elsewhere), TPUQ_AGENT_SOCKET=str(elsewhere / "a.sock"))
        del env["TPUQ_DATABASE_URL"]
        r = run(env, "submit", "--", "true")
        assert r.returncode == 1 and len(r.stderr.splitlines()) == 1
    assert f"TPUQ_HOME={stack.home}" in r.stderr and "an agent on this VM" in r.stderr
    if stack.deployment == "embedded":  # type: ignore[attr-defined]
        status = run(stack.env(TPUQ_HOME=str(elsewhere)), "status")
        assert status.returncode == 0 and f"TPUQ_HOME={stack.home}" in status.stderr

    stack.agents[0].stop()  # its note goes with it
    assert list((tmp_path / "run").iterdir()) == []
