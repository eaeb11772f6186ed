"""Many users, one TPU: each attack a colleague could try, with real accounts and the
real CLI, on both deployments. Everyone is who the kernel says, and touches only their
own jobs; what belongs to a job is its owner's."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.harness import wait_for
from tests.security.conftest import Account, user_env
from tpuq.protocol import PROTOCOL

SLEEPER = ["--", "/bin/sh", "-c", "echo ready; sleep 300"]


def submit(stack, acct: Account, *args: str, **env: str) -> int:
    r = acct.tpuq("submit", "-q", *args, env=user_env(stack, acct, **env))
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def test_everyone_is_who_the_kernel_says(shared, people):
    alice, bob = people
    me = json.loads(bob.tpuq("whoami", "--json", env=user_env(shared, bob, TPUQ_USER=alice.name))
                    .stdout)
    assert me == {"user": bob.name, "admin": False}, "TPUQ_USER names nobody but root's"
    job = submit(shared, bob, "--", "/bin/true", TPUQ_USER=alice.name)
    assert shared.wait_state(job, "succeeded").owner == bob.name


def test_nobody_changes_a_colleagues_job(shared, people):
    alice, bob = people
    job = submit(shared, alice, "--hold", *SLEEPER)
    for command in ("cancel", "release", "preempt"):
        r = bob.tpuq(command, str(job), env=user_env(shared, bob, TPUQ_USER=alice.name))
        assert r.returncode == 4, (command, r.stderr)
        assert f"is {alice.name}'s job; only its owner or an admin may change it" in r.stderr
    assert shared.job(job).state == "held"
    r = bob.tpuq("drain", "host-a", env=user_env(shared, bob))
    assert r.returncode == 4 and "only admins may drain hosts" in r.stderr
    r = bob.tpuq("quota", "set", "default", "--max-chips", "1",
                 env=user_env(shared, bob, TPUQ_ADMINS=bob.name, TPUQ_USER="root"))
    assert r.returncode == 4 and "only admins may change quotas" in r.stderr
    # her own job is hers to change, through the agent, whatever the database's mode
    r = alice.tpuq("cancel", str(job), env=user_env(shared, alice))
    assert r.returncode == 0, r.stderr
    assert shared.wait_state(job, "cancelled")


def test_an_admin_named_by_the_deployment_may(shared, people):
    alice, bob = people
    job = submit(shared, alice, "--hold", *SLEEPER)
    shared.tpuq("admin", "add", bob.name)  # root on the host names the first admin
    r = bob.tpuq("cancel", str(job), env=user_env(shared, bob))
    assert r.returncode == 0, r.stderr
    events = [e for e in json.loads(shared.tpuq("show", str(job), "--json").stdout)["events"]
              if e["to"] == "cancelled"]
    assert events[0]["actor"] == bob.name, "the act is recorded as the admin's"


def test_a_resubmitted_job_is_the_resubmitters_without_the_originals_secrets(shared, people):
    alice, bob = people
    job = submit(shared, alice, "--", "/bin/sh", "-c", 'echo "key=$WANDB_API_KEY"',
                 WANDB_API_KEY="alice-secret")
    shared.wait_state(job, "succeeded")
    r = bob.tpuq("resubmit", str(job), "--json", env=user_env(shared, bob))
    assert r.returncode == 0, r.stderr
    (new,) = json.loads(r.stdout)
    again = shared.wait_state(new["id"], "succeeded")
    assert again.owner == bob.name
    assert "alice-secret" not in shared.log_text(again.id)


def test_a_jobs_secrets_and_output_are_its_owners(shared, people):
    alice, bob = people
    job = submit(shared, alice, "--", "/bin/sh", "-c",
                 'echo "$WANDB_API_KEY" > "$TPUQ_CHECKPOINT_DIR/key"; echo out-of-alice',
                 WANDB_API_KEY="alice-secret")
    shared.wait_state(job, "succeeded")
    seen = json.loads(bob.tpuq("show", str(job), "--json", env=user_env(shared, bob)).stdout)
    assert seen["env"]["WANDB_API_KEY"] == "(hidden)", "names, not values"
    own = json.loads(alice.tpuq("show", str(job), "--json", env=user_env(shared, alice)).stdout)
    assert own["env"]["WANDB_API_KEY"] == "alice-secret"
    r = bob.tpuq("logs", str(job), env=user_env(shared, bob))
    assert r.returncode == 4 and "output is " in r.stderr and "out-of-alice" not in r.stdout
    assert "out-of-alice" in alice.tpuq("logs", str(job), env=user_env(shared, alice)).stdout
    # the files say so too
    ckpt = shared.checkpoint_dir(job)
    log = Path(shared.attempts(job)[0].log_path)
    assert stat.S_IMODE(ckpt.stat().st_mode) == 0o700 and ckpt.stat().st_uid == alice.uid
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and log.stat().st_uid == 0
    r = bob.run(["cat", str(ckpt / "key")], bob.env())
    assert r.returncode != 0 and "alice-secret" not in r.stdout
    if shared.deployment == "embedded":
        db = shared.home / "tpuq.db"
        assert stat.S_IMODE(db.stat().st_mode) == 0o600


def test_owner_mode_runs_only_an_authenticated_owner_and_never_a_system_account(shared,
                                                                                   people):
    alice, bob = people
    job = submit(shared, bob, "--", "id", "-un", TPUQ_USER="postgres")
    shared.wait_state(job, "succeeded")
    assert shared.log_text(job).strip() == bob.name
    # root may name an owner, but owner mode runs no system account
    job = shared.submit("--", "id", "-un", cwd="/tmp", TPUQ_USER="daemon")
    assert "system account" in shared.wait_state(job, "failed").reason


def test_a_client_hanging_up_at_once_does_not_kill_the_agent(shared, people):
    alice, bob = people
    sock = str(shared.home / "agent.sock")
    code = ("import socket\n"
            "for i in range(50):\n"
            "    s = socket.socket(socket.AF_UNIX)\n"
            f"    s.connect({sock!r})\n"
            "    s.sendall(b'{\"op\": \"ping\"}')\n"
            "    s.shutdown(socket.SHUT_WR)\n"
            "    s.close()\n"
            "    s = socket.socket(socket.AF_UNIX)\n"
            f"    s.connect({sock!r})\n"
            "    s.sendall(b'{\"op\": \"submit\", \"spec\": {}}')\n"
            "    s.close()\n")
    assert bob.python_code(code, bob.env()).returncode == 0
    agent = shared.agents[0]
    job = submit(shared, alice, "--", "/bin/true")
    shared.wait_state(job, "succeeded")
    assert agent.proc.poll() is None, agent.log_tail()


def test_bad_specs_over_the_socket_are_refused_and_harm_nobody(shared, people):
    alice, bob = people
    sock = str(shared.home / "agent.sock")
    good = '"command": ["/bin/true"], "cwd": "/tmp", "team": "default"'
    # raw JSON, as a hostile client would write it (1e999 parses as infinity)
    bad = ['"priority": "high"', '"env": "x"', '"command": [1, 2]', '"command": []',
           '"grace_s": 1e999', '"time_limit_s": -1', f'"name": "{"n" * 100_000}"',
           '"chips": true', '"team": "a b"', '"env": {"A": 1}', '"max_retries": 1000000',
           '"cwd": "relative"', '"stop_signal": []']
    requests = [f'{{"op": "submit", "v": {PROTOCOL}, "spec": {{{good}, "owner": "x", {change}}}}}'
                for change in bad]
    code = ("import json, socket, sys\n"
            "for line in sys.stdin:\n"
            "    s = socket.socket(socket.AF_UNIX)\n"
            f"    s.connect({sock!r})\n"
            "    s.sendall(line.strip().encode()); s.shutdown(socket.SHUT_WR)\n"
            "    out = b''\n"
            "    while chunk := s.recv(65536): out += chunk\n"
            "    print(out.decode())\n")
    r = bob.run([bob.python, "-c", code], bob.env(), input="\n".join(requests))
    replies = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(replies) == len(bad), r.stderr
    assert all(rep["reply"] == "refusal" and rep["kind"] == "refused" for rep in replies), replies
    assert all("\n" not in rep["error"] and len(rep["error"]) < 200 for rep in replies)
    listed = json.loads(shared.tpuq("status", "--json").stdout)
    assert listed == [], "nothing was written"
    job = submit(shared, alice, "--", "/bin/true")  # and the scheduler still schedules
    shared.wait_state(job, "succeeded")


def test_slow_clients_cannot_hold_up_anyone_elses_submit(shared, people):
    alice, bob = people
    sock = str(shared.home / "agent.sock")
    slow = ("import socket, time\n"
            "conns = []\n"
            "for i in range(40):\n"
            "    s = socket.socket(socket.AF_UNIX)\n"
            f"    s.connect({sock!r})\n"
            "    conns.append(s)\n"
            "for _ in range(4):\n"
            "    for s in conns:\n"
            "        try: s.send(b' ')\n"
            "        except OSError: pass\n"
            "    time.sleep(3)\n")
    proc = subprocess.Popen([bob.python, "-c", slow], env=bob.env(), user=bob.uid,
                            group=bob.gid, extra_groups=[], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: len(os.listdir(f"/proc/{proc.pid}/fd")) >= 40, 30,
                 "bob's slow clients to connect")
        job = submit(shared, alice, "--", "/bin/true")  # answered while bob trickles
        shared.wait_state(job, "succeeded")
    finally:
        proc.kill()
        proc.wait(10)


def test_with_the_agent_stopped_a_colleague_gets_one_clear_line(shared, people):
    alice, _ = people
    shared.agents[0].stop()
    r = alice.tpuq("status", env=user_env(shared, alice))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("tpuq: error: ") and len(r.stderr.splitlines()) == 1, r.stderr
    assert "agent" in r.stderr


def test_only_a_teams_members_charge_it_and_the_default_team_stays_open(shared, people):
    alice, bob = people
    shared.tpuq("quota", "add-member", "vision", alice.name)
    job = submit(shared, alice, "--team", "vision", "--", "/bin/true")
    assert shared.wait_state(job, "succeeded").team == "vision"
    r = bob.tpuq("submit", "--team", "vision", "--", "/bin/true", env=user_env(shared, bob))
    assert (r.returncode, r.stderr) == (2, f"tpuq: error: {bob.name} is not a member of team "
                                           f"vision; an admin adds you with `tpuq quota "
                                           f"add-member vision {bob.name}`\n")
    own = submit(shared, bob, "--", "/bin/true")
    assert shared.wait_state(own, "succeeded").team == "default"


def test_nobody_updates_a_colleagues_job(shared, people):
    alice, bob = people
    job = submit(shared, alice, "--hold", *SLEEPER)
    r = bob.tpuq("update", str(job), "--priority", "9", env=user_env(shared, bob))
    assert r.returncode == 4 and f"is {alice.name}'s; only its owner or an admin" in r.stderr
    r = alice.tpuq("update", str(job), "--priority", "9", env=user_env(shared, alice))
    assert r.returncode == 0, r.stderr
    assert shared.job(job).priority == 9


def test_a_functions_result_is_its_owners(shared, people):
    """Alice's function runs as alice (owner mode) and its value is hers: bob may not
    read it, from Python as from anywhere."""
    alice, bob = people
    code = ("import os, pwd; from tpuq.client import submit; "
            "j = submit(lambda: pwd.getpwuid(os.getuid()).pw_name + ':secret'); "
            "print(j.id); print(j.result(timeout=90))")
    r = alice.python_code(code, user_env(shared, alice))
    assert r.returncode == 0, r.stderr
    job_id, value = r.stdout.split()
    assert value == f"{alice.name}:secret", "it ran as its owner"
    r = bob.python_code(f"from tpuq.client import Job; Job({job_id}).result()",
                        user_env(shared, bob))
    assert r.returncode == 1 and "only its owner or an admin may read it" in r.stderr
    assert "secret" not in r.stderr


# a value whose unpickling runs a command: what a hostile job returns for an admin to load
BOOBY_TRAP = ("import os\n"
              "class Trap:\n"
              "    def __reduce__(self):\n"
              "        return (os.system, ('touch {marker}',))\n")


def test_nobody_loads_another_accounts_result(shared, people, tmp_path):
    """Loading a pickle runs code of whoever wrote it: root, an admin, root acting as the
    owner (TPUQ_USER), none of them loads alice's result; each gets one line and may
    take the bytes unopened. Alice loads her own."""
    from tpuq.client import ClientError, Job
    from tpuq.settings import load

    alice, bob = people
    marker = f"/tmp/tpuq-trap-{alice.name}"
    code = (BOOBY_TRAP.format(marker=marker) + "from tpuq.client import submit\n"
            "j = submit(Trap)\nprint(j.id)\nj.wait(90)\n")
    r = alice.python_code(code, user_env(shared, alice))
    assert r.returncode == 0, r.stderr
    job_id = int(r.stdout.split()[0])
    shared.tpuq("admin", "add", bob.name)
    try:
        for acting_as in ("", alice.name):  # root as itself, and root acting as alice
            root = Job(job_id, load(shared.env(TPUQ_USER=acting_as)))
            with pytest.raises(ClientError) as refused:
                root.result(timeout=60)
            assert not os.path.exists(marker), "root ran alice's code"
            assert refused.value.message == (
                f"job {job_id} is {alice.name}'s: loading its result would run code its "
                f"job wrote, as you; only {alice.name} loads it (`Job({job_id})"
                ".result_bytes()` gives the pickled bytes, unopened)")
            raw = root.result_bytes()
            assert raw is not None and b"system" in raw, "the bytes, unopened"
        r = bob.python_code(f"from tpuq.client import Job; Job({job_id}).result()",
                            user_env(shared, bob))
        assert r.returncode == 1 and f"only {alice.name} loads it" in r.stderr, r.stderr
        assert not os.path.exists(marker), "an admin ran alice's code"
        r = alice.python_code(f"from tpuq.client import Job; Job({job_id}).result()",
                              user_env(shared, alice))
        assert r.returncode == 0, r.stderr
        assert os.path.exists(marker), "her own result is hers to load, as herself"
        assert os.stat(marker).st_uid == alice.uid
    finally:
        if os.path.exists(marker):
            os.unlink(marker)
