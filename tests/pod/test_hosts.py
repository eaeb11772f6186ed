"""Which workers make up the pod: hosts files, lists, the podips.txt habit, metadata."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.metadata_server import FakeMetadata
from tests.harness import ROOT, TPUQ
from tpuq.pod import hosts
from tpuq.pod.hosts import HostsError, Worker


def never_local(host: str) -> bool:
    return False


def test_hosts_file_entries_comments_users_and_ports(tmp_path: Path) -> None:
    f = tmp_path / "pod.txt"
    f.write_text("# host 0 first\n10.0.0.2\n\n  alice@10.0.0.3:2222   # w1\n"
                 "[fd00::4]:22\nbob@tpu-w3\n")
    pod = hosts.from_option(str(f), listed_only=True)
    assert pod.workers == (Worker(0, "10.0.0.2"), Worker(1, "10.0.0.3", "alice", 2222),
                           Worker(2, "fd00::4", None, 22), Worker(3, "tpu-w3", "bob"))
    assert [w.address for w in pod.workers] == ["10.0.0.2", "alice@10.0.0.3:2222",
                                                "[fd00::4]:22", "bob@tpu-w3"]


def test_the_podips_habit_makes_this_machine_w0(tmp_path: Path) -> None:
    """tpu-starter's ~/podips.txt lists the *other* workers; podrun adds host 0."""
    f = tmp_path / "podips.txt"
    f.write_text("10.0.0.3\n10.0.0.4\n")
    pod = hosts.from_option(str(f), is_local=never_local)
    assert [w.host for w in pod.workers] == [hosts.THIS_MACHINE, "10.0.0.3", "10.0.0.4"]
    assert "w0" in pod.note
    listed = hosts.from_option(str(f), listed_only=True, is_local=never_local)
    assert [w.host for w in listed.workers] == ["10.0.0.3", "10.0.0.4"]
    # a list that names this machine is taken as it is, in its order
    mine = hosts.from_option("10.0.0.3,127.0.0.1", is_local=lambda h: h == "127.0.0.1")
    assert [(w.name, w.host) for w in mine.workers] == [("w0", "10.0.0.3"), ("w1", "127.0.0.1")]
    assert hosts.is_this_machine("127.0.0.1") and not hosts.is_this_machine("192.0.2.1")


@pytest.mark.parametrize(("text", "says"), [
    ("a b\n", "pod.txt:1: one host per line"),
    ("# nothing\n\n", "pod.txt: names no host"),
    ("@h\n", "pod.txt:1: empty user"),
    ("h:0\n", "pod.txt:1: bad port"),
    ("h/x\n", "pod.txt:1: 'h/x' is not a host"),
    ("[fd00::1\n", "pod.txt:1: cannot read '[fd00::1'"),
])
def test_bad_hosts_files_say_where(tmp_path: Path, text: str, says: str) -> None:
    f = tmp_path / "pod.txt"
    f.write_text(text)
    with pytest.raises(HostsError, match=says.replace("[", r"\[")):
        hosts.from_option(str(f), listed_only=True)


def test_metadata_endpoints_in_worker_order() -> None:
    """worker-network-endpoints: comma-separated, the IP is the last colon field (jax
    `_src/clusters/cloud_tpu_cluster.py` reads it the same way)."""
    assert hosts.parse_endpoints("unknown:unknown:10.130.0.5,unknown:unknown:10.130.0.6") == [
        "10.130.0.5", "10.130.0.6"]
    assert hosts.parse_endpoints("10.0.0.2") == ["10.0.0.2"]
    with pytest.raises(HostsError, match="cannot read 'x:y:z'"):
        hosts.parse_endpoints("x:y:z")
    # the newer format, plain hostnames (jax 0.10.0, clusters/cloud_tpu_cluster.py)
    assert hosts.parse_endpoints("t1v-n-8f3a-w-0,t1v-n-8f3a-w-1") == [
        "t1v-n-8f3a-w-0", "t1v-n-8f3a-w-1"]
    with FakeMetadata() as md:
        assert hosts.from_metadata(md.url) is None  # no pod attributes: not a TPU VM
        md.set("instance/attributes/worker-network-endpoints", "a:b:10.0.0.2,a:b:10.0.0.3")
        md.set("instance/attributes/agent-worker-number", "1")
        pod = hosts.from_metadata(md.url)
        assert pod is not None and [w.host for w in pod.workers] == ["10.0.0.2", "10.0.0.3"]
        assert pod.this_worker == 1 and "w1, not host 0" in pod.note


def tpuq(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TPUQ_")}
    return subprocess.run([*TPUQ, *args], capture_output=True, text=True, timeout=60,
                          env={**base, "HOME": str(home), "PYTHONPATH": str(ROOT),
                               "TPUQ_HOME": str(home / "tpuq"), **env})


def test_pod_hosts_from_metadata_then_podips_txt(tmp_path: Path) -> None:
    with FakeMetadata() as md:
        md.set("instance/attributes/worker-network-endpoints",
               "unknown:unknown:127.0.0.1,unknown:unknown:127.0.0.2")
        r = tpuq(tmp_path, "pod", "hosts", "--json", TPUQ_METADATA_URL=md.url)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["source"] == f"metadata {md.url}" and got["this_worker"] == 0
        assert [w["host"] for w in got["workers"]] == ["127.0.0.1", "127.0.0.2"]
        # a configured metadata server that names no pod: ~/podips.txt, the habit
        md.set("instance/attributes/worker-network-endpoints", None)
        (tmp_path / "podips.txt").write_text("127.0.0.2\n127.0.0.3\n")
        r = tpuq(tmp_path, "pod", "hosts", TPUQ_METADATA_URL=md.url)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[:2] == ["w0   127.0.0.2", "w1   127.0.0.3"]
        assert f"from {tmp_path}/podips.txt" in r.stdout
        (tmp_path / "podips.txt").unlink()
        r = tpuq(tmp_path, "pod", "hosts", TPUQ_METADATA_URL=md.url)
        assert r.returncode == 2 and r.stderr.startswith("tpuq: error: no workers:")


def test_pod_commands_do_not_slow_the_others() -> None:
    """`tpuq --help` and `tpuq submit` never import Fabric or Paramiko."""
    check = ("import sys\nfrom tpuq.cli.main import main\n"
             "sys.argv = ['tpuq', *sys.argv[1:]]\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'fabric', 'paramiko', 'invoke'}),"
             " file=sys.stderr)\n")
    for args in (["--help"], ["submit", "--help"], ["pod", "--help"], ["pod", "run", "--help"]):
        r = subprocess.run([sys.executable, "-c", check, *args], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert r.stderr.strip().splitlines()[-1] == "[]", (args, r.stderr)
        assert r.returncode == 0


def test_pod_help_teaches() -> None:
    out = subprocess.run([*TPUQ, "pod", "run", "--help"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    for word in ("tpuq pod run -- python3 train.py", "--fail-fast", "--timeout", "--hosts",
                 "TPUQ_POD", "Exit status", "124", "255"):
        assert word in out, word
