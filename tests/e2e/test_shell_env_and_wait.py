"""A job runs in the environment it was submitted from (`--export`), its `--env` values
may name its own variables, and `tpuq wait`, `submit --wait` and `logs -f` exit with
the job's outcome."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.harness import FIXTURES


def test_the_job_computes_byte_for_byte_what_the_submitting_shell_computes(stack, host,
                                                                          tmp_path):
    stack.start_agent(host)
    shell = {"OPENBLAS_NUM_THREADS": "1", "OPENBLAS_CORETYPE": "Prescott", "MY_LR": "3e-4"}
    script = FIXTURES / "numeric.py"
    direct = subprocess.run([sys.executable, str(script)], env=stack.env(**shell),
                            cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert "MY_LR 3e-4" in direct and "OPENBLAS_CORETYPE Prescott" in direct
    job = stack.submit(str(script), cwd=tmp_path, **shell)
    stack.wait_state(job, "succeeded")
    assert stack.log_text(job) == direct


def job_env(stack, *args: str, **shell: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    job = stack.submit(*args, "--", "env", **shell)
    stack.wait_state(job, "succeeded")
    return dict(line.split("=", 1) for line in stack.log_text(job).splitlines() if "=" in line)


def test_export_narrows_and_the_terminal_session_stays_behind(stack, host):
    stack.start_agent(host)
    shell = {"MY_LR": "3e-4", "SSH_CONNECTION": "10.0.0.1 5 10.0.0.2 22", "TERM": "xterm",
             "TMUX": "/tmp/tmux-0/default,1,0"}
    everything = job_env(stack, **shell)
    assert everything["MY_LR"] == "3e-4"
    assert not {"SSH_CONNECTION", "TERM", "TMUX"} & set(everything)
    assert "MY_LR" not in job_env(stack, "--export", "NONE", **shell)
    assert job_env(stack, "--export", "MY_LR", **shell)["MY_LR"] == "3e-4"
    own = job_env(stack, "--env", "CKPT=$TPUQ_CHECKPOINT_DIR/orbax", **shell)
    assert own["CKPT"] == own["TPUQ_CHECKPOINT_DIR"] + "/orbax"


def test_wait_submit_wait_and_logs_follow_exit_with_the_outcome(stack, host):
    stack.start_agent(host)
    ok = stack.submit("--", "/bin/true")
    bad = stack.submit("--", "/bin/false")
    slow = stack.submit("--time", "1s", "--", "sleep", "60")
    held = stack.submit("--hold", "--", "/bin/true")
    stack.tpuq("cancel", str(held))
    r = stack.tpuq("wait", str(ok), check=False)
    assert (r.returncode, r.stderr) == (0, f"job {ok} succeeded\n")
    assert stack.tpuq("wait", str(bad), check=False).returncode == 10
    assert stack.tpuq("wait", str(held), check=False).returncode == 11
    assert stack.tpuq("wait", str(slow), check=False).returncode == 12
    r = stack.tpuq("wait", "--json", str(ok), str(slow), str(bad), check=False)
    assert r.returncode == 12, "the first job that did not succeed, in the order given"
    assert json.loads(r.stdout) == [{"id": ok, "state": "succeeded"},
                                    {"id": slow, "state": "timeout"},
                                    {"id": bad, "state": "failed"}]
    assert stack.tpuq("logs", "-f", str(bad), check=False).returncode == 10
    assert stack.tpuq("logs", "-f", str(ok), check=False).returncode == 0
    r = stack.tpuq("submit", "--wait", "--", "sh", "-c", "exit 3", check=False)
    assert r.returncode == 10 and "failed" in r.stderr
    r = stack.tpuq("submit", "--wait", "-q", "--", "/bin/true", check=False)
    assert r.returncode == 0 and r.stdout.strip().isdigit()
