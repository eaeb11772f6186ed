"""Every chip shape a host offers is proven on that host.

The bounds of a chip subset depend on the generation, the host's physical layout and the
libtpu in use, and several are in no source (shapes.TABLE marks them). So before a host
offers a shape, the agent runs a short probe of it in exactly the environment a job of
that shape gets (jobenv.build_env, on the shape's first aligned block of chips), and
offers only the shapes that pass; the others are written to the host's `unavailable` map
with the probe's error, which `tpuq status` shows. A wrong table entry costs a probe,
never a user's job.

The probe is a setting (TPUQ_PROBE_COMMAND): `auto` asks JAX for its local devices on a
host whose TPU generation is known (a real TPU VM) and probes nothing elsewhere (fake
devices, off GCP); `off` probes nothing; anything else is a command line. A probe exits
0 when the shape works; what it prints after `tpuq-probe-files:` (a JSON list of paths:
its Python, JAX, libtpu) is watched, and when one of them changes (an upgrade), the
shapes are proven again. Results are kept per host under the agent's home, with those
files' identities, so a restart with nothing changed probes nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tpuq import envinputs, jobenv
from tpuq.agent import exits
from tpuq.settings import Settings
from tpuq.shapes import Bounds, shapes_of
from tpuq.state.hosts import WHOLE_HOST

log = logging.getLogger("tpuq.agent")

FILES_MARK = "tpuq-probe-files:"
CHIPS_VAR, DEVICES_VAR = "TPUQ_PROBE_CHIPS", "TPUQ_PROBE_DEVICES"
MAX_ERROR = 300
# JAX devices per chip: v2, v3 and TPU7x have two TensorCores per chip, each a device
# (TPU_FACTS: "Several jobs on one host"; tpu-info devices_per_chip)
DEVICES_PER_CHIP = {"v2": 2, "v3": 2, "tpu7x": 2}

# The default probe: JAX's local devices must be this many TPU devices.
SCRIPT = f"""
import json, os, sys
files = [sys.executable]
import jax
files.append(jax.__file__)
for name in ("jaxlib", "libtpu"):
    try:
        files.append(__import__(name).__file__)
    except Exception:
        pass
print("{FILES_MARK}", json.dumps(files), flush=True)
devices = jax.local_devices()
want = int(os.environ["{DEVICES_VAR}"])
kinds = sorted({{d.platform for d in devices}})
if kinds != ["tpu"] or len(devices) != want:
    sys.exit(f"expected {{want}} TPU devices, JAX sees {{len(devices)}}: {{devices}}")
"""


@dataclass(frozen=True)
class Result:
    chips: int
    error: str | None  # None: the shape works
    files: tuple[str, ...] = ()


def command_of(setting: str, real_tpu: bool) -> list[str] | None:
    """The probe's argv, or None: nothing to probe. `auto` asks JAX only on a host whose
    PCI bus shows TPU chips (not on fake devices, whatever type the metadata names)."""
    word = setting.strip()
    if word.lower() in ("off", "none", ""):
        return None
    if word.lower() == "auto":
        return ["python3", "-c", SCRIPT] if real_tpu else None
    return shlex.split(word)


def identity(paths: tuple[str, ...]) -> str:
    """What changes when any of these files is replaced or rewritten (an upgrade)."""
    h = hashlib.sha256()
    for p in sorted(paths):
        try:
            st = os.stat(p)
            h.update(f"{p}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        except OSError:
            h.update(f"{p}\0gone\n".encode())
    return h.hexdigest()


def _files(stdout: str) -> tuple[str, ...]:
    for line in stdout.splitlines():
        if line.startswith(FILES_MARK):
            try:
                found = json.loads(line[len(FILES_MARK):])
            except ValueError:
                return ()
            return tuple(str(p) for p in found if isinstance(p, str))[:16]
    return ()


def _error(code: int | None, stderr: str) -> str:
    failed = exits.startup_failure(stderr)
    if failed is not None:
        return failed.message[:MAX_ERROR]
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    last = lines[-1] if lines else f"exited with code {code}"
    return last[:MAX_ERROR]


def run(argv: list[str], env: Mapping[str, str], chips: int, timeout_s: float) -> Result:
    """One probe of a `chips`-chip shape, in `env` (the shape's job environment)."""
    with tempfile.TemporaryDirectory(prefix="tpuq-probe-") as cwd:
        try:
            r = subprocess.run(argv, env=dict(env), cwd=cwd, capture_output=True, text=True,
                               timeout=timeout_s, start_new_session=True)
        except subprocess.TimeoutExpired:
            return Result(chips, f"the probe ran longer than {timeout_s:g}s")
        except OSError as e:
            return Result(chips, f"the probe cannot start: {e}")
    files = _files(r.stdout)
    return Result(chips, None if r.returncode == 0 else _error(r.returncode, r.stderr), files)


def unproven(error: str) -> bool:
    """The probe's own Python has no JAX: it proves nothing about the TPU."""
    return "No module named 'jax'" in error or "No module named jax" in error


def withheld(results: list[Result], table: Mapping[int, Bounds],
             command: str) -> dict[str, str]:
    """The host's `unavailable` map: each failed shape with its probe's error. A probe
    whose Python has no JAX proves nothing: then the table's verified shapes are offered
    and the others wait for a probe that can run."""
    out: dict[str, str] = {}
    for r in results:
        if r.error is None:
            continue
        if unproven(r.error) and table[r.chips].verified:
            continue
        hint = " (TPUQ_PROBE_COMMAND: a Python with jax[tpu])" if unproven(r.error) else ""
        out[str(r.chips)] = f"probe failed: {r.error}{hint}"
    return out


def unprobed(table: Mapping[int, Bounds], host_chips: int, generation: str | None,
             real_tpu: bool = True) -> dict[str, str]:
    """Without probes: shapes the generation's table leaves out (a host-size table
    shape it has no bounds for), and on real chips of a known generation its unverified
    shapes. Fake devices (no TPU on the PCI bus) offer the rest of their table."""
    out = {str(n): f"no bounds known for {n} chips on this {generation} host"
           for n in shapes_of(host_chips) if n not in table}
    if generation and real_tpu:
        out.update({str(n): f"unverified ({b.source}) and not probed (TPUQ_PROBE_COMMAND)"
                    for n, b in table.items() if not b.verified})
    return out


@dataclass
class Prover:
    """Runs the probes of one host and remembers what they proved (`state_path`)."""

    argv: list[str] | None
    state_path: str
    timeout_s: float
    results: dict[str, str] | None = None  # the last unavailable map proven
    files: tuple[str, ...] = ()
    proven_for: str = ""  # identity(files) when proven

    def load(self) -> bool:
        """The kept results, when they were proven with this command and these files."""
        try:
            with open(self.state_path) as f:
                kept = json.load(f)
            files = tuple(kept["files"])
            if kept["argv"] != self.argv or kept["identity"] != identity(files):
                return False
            self.results, self.files, self.proven_for = dict(kept["unavailable"]), files, \
                kept["identity"]
            return True
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def changed(self) -> bool:
        """Whether the Python, JAX or libtpu the probes used changed since."""
        return bool(self.files) and identity(self.files) != self.proven_for

    def prove(self, table: Mapping[int, Bounds], env_for: Callable[[int], Mapping[str, str]]
              ) -> dict[str, str]:
        """Probe every shape of `table` (smallest first) and keep the results."""
        assert self.argv is not None
        results = []
        for n in sorted(table):
            r = run(self.argv, env_for(n), n, self.timeout_s)
            log.info("shape probe, %d chip%s: %s", n, "s" if n > 1 else "",
                     "ok" if r.error is None else r.error)
            results.append(r)
        self.files = tuple(sorted({f for r in results for f in r.files}))
        self.proven_for = identity(self.files)
        self.results = withheld(results, table, " ".join(self.argv))
        self._keep()
        return self.results

    def _keep(self) -> None:
        try:
            os.makedirs(os.path.dirname(self.state_path), exist_ok=True)
            tmp = f"{self.state_path}.tmp"
            with open(tmp, "w") as f:
                json.dump({"argv": self.argv, "files": list(self.files),
                           "identity": self.proven_for, "unavailable": self.results}, f)
            os.replace(tmp, self.state_path)
        except OSError as e:
            log.warning("cannot keep the shape probes' results in %s: %s", self.state_path, e)


class HostShapes:
    """The shapes this host offers: proven at agent start and again after an upgrade of
    what the probes used, each time only while no job runs here (the executor takes none
    meanwhile). `write(unavailable)` records the result on the host's row."""

    def __init__(self, executor: Any, settings: Settings, generation: str | None,
                 write: Callable[[dict[str, str] | None], None], real_tpu: bool) -> None:
        self.executor = executor
        self.settings = settings
        self.generation = generation
        self.write = write
        self.n = len(executor.chips)
        self.table = shapes_of(self.n, generation)
        self.prover = Prover(command_of(settings.probe_command, real_tpu),
                             os.path.join(settings.home, "run", settings.host, "shapes.json"),
                             settings.probe_timeout_s)
        self.pending = False
        self.real_tpu = real_tpu

    def initial(self) -> dict[str, str] | None:
        """What the host offers when it registers (None: every shape of its table)."""
        if self.prover.argv is None:
            return unprobed(self.table, self.n, self.generation, self.real_tpu) or None
        if self.prover.load():
            return self.prover.results or None
        self.pending = True
        return {WHOLE_HOST: "proving its chip shapes (agent start)"}

    def tick(self) -> None:
        """Prove the shapes when they need it and the host is idle."""
        if self.prover.argv is None:
            return
        if not self.pending and self.prover.changed():
            log.warning("the Python, JAX or libtpu the shape probes use changed: proving the "
                        "shapes again once no job runs here")
            self.pending = True
            self.write({WHOLE_HOST: "proving its chip shapes again (its Python, JAX or "
                                    "libtpu changed): after the running jobs"})
        if not self.pending or not self.executor.begin_probe():
            return
        try:
            held = self.executor.claim_tpu(tuple(sorted(self.executor.chips)))
            if held:
                self.write({WHOLE_HOST: f"cannot prove its chip shapes: {held}"})
                return
            results = self.prover.prove(self.table, self.env_for)
            self.pending = False
            self.write(results or None)
        finally:
            self.executor.end_probe()

    def env_for(self, n: int) -> dict[str, str]:
        """The environment a job of `n` chips gets here, on the first aligned block."""
        ex = self.executor
        chips = sorted(ex.chips)[:n]
        env = jobenv.build_env(
            dataclasses.replace(ex.host_inputs(), chip_count=self.n, generation=self.generation),
            envinputs.AttemptInputs(
                job_env={}, job_id=0, attempt=0, resumed=False, tcmalloc=True,
                checkpoint_dir=os.path.join(self.settings.home, "run", "probe"),
                chips=None if n == self.n else chips))
        env[CHIPS_VAR] = ",".join(map(str, chips))
        env[DEVICES_VAR] = str(n * DEVICES_PER_CHIP.get(self.generation or "", 1))
        return env
