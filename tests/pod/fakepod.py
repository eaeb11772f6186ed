"""A pod slice made of real sshd processes on loopback, one per worker.

Worker i is an `sshd` (Debian's openssh-server) listening on 127.0.0.<i+1> at a port of
the test's, with a host key and an authorized key made for the test, and a fake TPU of
its own (tests/harness.py FakeHost: device files, libtpu lock, TPUQ_HOME), handed to
every session through sshd's `SetEnv`. Each sshd runs in a mount namespace of its own
where /etc, /opt and /var/lib are overlays, so what `tpuq pod setup` installs on one
worker (/etc/tpuq/agent.env, the unit, /opt/tpuq) is that worker's alone and never the
machine's. A worker has no systemd: `systemctl` and `apt-get` are shims on its PATH
that write what they were asked into the worker's shim log (tests/pod/shims/).

Every process a session starts carries `TPUQ_TEST_SSHD=<token>` in its environment, so
`close()` finds and kills them all, as well as the sshd processes themselves.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.fakes.metadata_server import FakeMetadata
from tests.harness import ROOT, TPUQ, FakeHost, wait_for
from tests.services import free_port

SSHD = "/usr/sbin/sshd"
SHIMS = Path(__file__).resolve().parent / "shims"
MARK = "TPUQ_TEST_SSHD"


@dataclass
class PodWorker:
    index: int
    root: Path
    addr: str
    host: FakeHost
    metadata: FakeMetadata
    proc: subprocess.Popen[bytes] | None = None

    @property
    def shim_log(self) -> Path:
        return self.root / "shim.log"

    def shim_calls(self) -> list[str]:
        return self.shim_log.read_text().splitlines() if self.shim_log.exists() else []

    def read(self, path: str) -> str | None:
        """A file as this worker sees it (inside its mount namespace), or None."""
        assert self.proc is not None
        r = subprocess.run(["nsenter", "-t", str(self.proc.pid), "-m", "cat", path],
                           capture_output=True, text=True, timeout=30)
        return r.stdout if r.returncode == 0 else None

    def mtime(self, path: str) -> str | None:
        assert self.proc is not None
        r = subprocess.run(["nsenter", "-t", str(self.proc.pid), "-m", "stat", "-c", "%Y.%i",
                            path], capture_output=True, text=True, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else None


@dataclass
class FakePod:
    root: Path
    size: int = 3
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    workers: list[PodWorker] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.port = free_port()
        self.key = self.root / "id_test"
        self.home = self.root / "home"  # HOME of the tpuq processes the test runs
        (self.home / ".ssh").mkdir(parents=True)
        for path in (self.key, self.root / "host_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                           check=True, timeout=30)

    # ---- starting and stopping -------------------------------------------------------
    def start(self) -> FakePod:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        for i in range(self.size):
            root = self.root / f"w{i}"
            host = FakeHost(root / "tpu", name=f"pod-test-w{i}", chips=4)
            md = FakeMetadata().start()
            md.set("instance/id", str(1000 + i))
            md.set("instance/attributes/agent-worker-number", str(i))
            md.set("instance/attributes/tpu-env", "NODE_ID: 'pod-test'")
            w = PodWorker(i, root, f"127.0.0.{i + 1}", host, md)
            self.workers.append(w)
            self._start_sshd(w)
        for w in self.workers:
            wait_for(lambda w=w: self._listening(w), 20, f"sshd of w{w.index}")
        return self

    def _sshd_config(self, w: PodWorker) -> Path:
        env = {
            "PATH": f"{SHIMS}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "PYTHONPATH": str(ROOT), MARK: self.token, "TPUQ_TEST_PYTHON": sys.executable,
            "TPUQ_SHIMS": str(SHIMS), "TPUQ_SHIM_LOG": str(w.shim_log),
            "TPUQ_SHIM_STATE": str(w.root / "shim-state"), "TPUQ_TEST_WORKER": str(w.index),
            "TPUQ_VENV_PYTHON": str(SHIMS / "python3-for-venv"),
            "TPUQ_METADATA_URL": w.metadata.url, "TPUQ_HOME": str(w.root / "h"),
            "TPUQ_ANNOUNCE_DIR": str(w.root / "announce"),
            **{k: v for k, v in w.host.env().items() if k != "TPUQ_HOST"},
        }
        config = w.root / "sshd_config"
        config.write_text("\n".join([
            f"ListenAddress {w.addr}:{self.port}",
            f"HostKey {self.root / 'host_key'}",
            f"AuthorizedKeysFile {self.key}.pub",
            "StrictModes no", "UsePAM no", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
            "PidFile none", "PrintMotd no", "MaxStartups 100", "MaxSessions 100",
            "Subsystem sftp internal-sftp", "LogLevel ERROR",
            "SetEnv " + " ".join(f'"{k}={v}"' for k, v in env.items()),
        ]) + "\n")
        return config

    def _start_sshd(self, w: PodWorker) -> None:
        w.root.mkdir(parents=True, exist_ok=True)
        config = self._sshd_config(w)
        ov = w.root / "overlay"
        ov.mkdir()
        # /etc, /opt and /var/lib of this worker alone: overlays whose upper layers live
        # on a tmpfs of the namespace, gone with it
        mounts = [f"mount -t tmpfs tmpfs {ov}"]
        for name, lower in (("etc", "/etc"), ("opt", "/opt"), ("var-lib", "/var/lib")):
            mounts += [f"mkdir -p {ov}/{name}/up {ov}/{name}/work",
                       f"mount -t overlay overlay -o lowerdir={lower},upperdir={ov}/{name}/up,"
                       f"workdir={ov}/{name}/work {lower}"]
        script = " && ".join([*mounts, f"exec {SSHD} -D -e -f {config}"])
        log = open(w.root / "sshd.log", "ab")
        w.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                   script], stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
        log.close()

    def _listening(self, w: PodWorker) -> bool:
        assert w.proc is not None
        if w.proc.poll() is not None:
            raise AssertionError(f"sshd of w{w.index} exited {w.proc.returncode}: "
                                 f"{(w.root / 'sshd.log').read_text()}")
        import socket

        with socket.socket() as s:
            return s.connect_ex((w.addr, self.port)) == 0

    def close(self) -> None:
        """Every sshd, and every process any session started (found by their mark)."""
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait(10)
            w.metadata.close()
        deadline = time.monotonic() + 10
        while (left := self.session_pids()) and time.monotonic() < deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def session_pids(self) -> list[int]:
        """Live (not zombie) processes started by a session of this pod's sshd."""
        return marked_pids(f"{MARK}={self.token}".encode())

    # ---- what a test uses -------------------------------------------------------------
    def hosts_file(self, name: str = "pod.txt", workers: list[int] | None = None) -> Path:
        path = self.root / name
        picked = self.workers if workers is None else [self.workers[i] for i in workers]
        path.write_text("# the test's workers\n" + "".join(f"{w.addr}  # w{w.index}\n"
                                                           for w in picked))
        return path

    def env(self, **more: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TPUQ_")}
        env.update({"HOME": str(self.home), "PYTHONPATH": str(ROOT), "TPUQ_POD_PORT": str(self.port),
                    "TPUQ_POD_KEY": str(self.key), "TPUQ_POD_USER": "root",
                    "TPUQ_HOME": str(self.root / "cli-home")})
        env.update(more)
        return env

    def tpuq(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*TPUQ, *args], env=self.env(**env), capture_output=True,
                              text=True, timeout=timeout, cwd=self.root)


def marked_pids(entry: bytes) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and entry in environ.split(b"\0"):
            found.append(int(name))
    return found


def is_running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has let go of everything; its parent reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def have_sshd() -> bool:
    return os.path.exists(SSHD) and shutil.which("unshare") is not None and os.geteuid() == 0
