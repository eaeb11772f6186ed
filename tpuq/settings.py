"""One settings object, built from defaults < the system's config file < the user's
config file < environment.

Every environment variable tpuq reads is named in ENV below and nowhere else, so the
README's configuration table and the code cannot drift apart. Import-light: the CLI's
fast path (submit through the agent socket) loads this and nothing heavier.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import sys

from tpuq.errors import TpuqError
from tpuq.records import Record, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# field name -> environment variable. The config file uses the field names as keys.
ENV: dict[str, str] = {
    "home": "TPUQ_HOME",
    "database_url": "TPUQ_DATABASE_URL",
    "broker_url": "TPUQ_BROKER_URL",
    "host": "TPUQ_HOST",
    "device_glob": "TPUQ_DEVICE_GLOB",
    "tpu_type": "TPUQ_TPU_TYPE",
    "libtpu_lockfile": "TPUQ_LIBTPU_LOCKFILE",
    "tpu_logs_dir": "TPUQ_TPU_LOGS_DIR",
    "lock_dir": "TPUQ_LOCK_DIR",
    "metadata_url": "TPUQ_METADATA_URL",
    "boot_id_file": "TPUQ_BOOT_ID_FILE",
    "machine_id_file": "TPUQ_MACHINE_ID_FILE",
    "pci_dir": "TPUQ_PCI_DIR",
    "tcmalloc_path": "TPUQ_TCMALLOC_PATH",
    "team": "TPUQ_TEAM",
    "user": "TPUQ_USER",
    "heartbeat_s": "TPUQ_HEARTBEAT_S",
    "lease_s": "TPUQ_LEASE_S",
    "leader_lease_s": "TPUQ_LEADER_LEASE_S",
    "host_stale_s": "TPUQ_HOST_STALE_S",
    "poll_s": "TPUQ_POLL_S",
    "default_grace_s": "TPUQ_DEFAULT_GRACE_S",
    "retry_backoff_s": "TPUQ_RETRY_BACKOFF_S",
    "port_base": "TPUQ_PORT_BASE",
    "fair_share_half_life_h": "TPUQ_FAIR_SHARE_HALF_LIFE_H",
    "broker_visibility_s": "TPUQ_BROKER_VISIBILITY_S",
    "maintenance_lead_s": "TPUQ_MAINTENANCE_LEAD_S",
    "agent_socket": "TPUQ_AGENT_SOCKET",
    "agent_connections": "TPUQ_AGENT_CONNECTIONS",
    "agent_connections_per_user": "TPUQ_AGENT_CONNECTIONS_PER_USER",
    "run_as": "TPUQ_RUN_AS",
    "run_as_min_uid": "TPUQ_RUN_AS_MIN_UID",
    "log_max_bytes": "TPUQ_LOG_MAX_BYTES",
    "slice_name": "TPUQ_SLICE_NAME",
    "slice_worker": "TPUQ_SLICE_WORKER",
    "slice_type": "TPUQ_SLICE_TYPE",
    "gang_start_s": "TPUQ_GANG_START_S",
    "coordinator_port": "TPUQ_COORDINATOR_PORT",
    "notify": "TPUQ_NOTIFY",
    "notify_to": "TPUQ_NOTIFY_TO",
    "notify_preempts": "TPUQ_NOTIFY_PREEMPTS",
    "notify_poll_s": "TPUQ_NOTIFY_POLL_S",
    "notify_tries": "TPUQ_NOTIFY_TRIES",
    "notify_retry_s": "TPUQ_NOTIFY_RETRY_S",
    "host_error_retries": "TPUQ_HOST_ERROR_RETRIES",
    "chip_release_s": "TPUQ_CHIP_RELEASE_S",
    "devwatch_trust_s": "TPUQ_DEVWATCH_TRUST_S",
    "probe_command": "TPUQ_PROBE_COMMAND",
    "probe_timeout_s": "TPUQ_PROBE_TIMEOUT_S",
    "thp_file": "TPUQ_THP_FILE",
    "tpu_api_endpoint": "TPUQ_TPU_API_ENDPOINT",
    "fleet_poll_s": "TPUQ_FLEET_POLL_S",
    "fleet_backoff_s": "TPUQ_FLEET_BACKOFF_S",
    "fleet_backoff_max_s": "TPUQ_FLEET_BACKOFF_MAX_S",
    "fleet_join_s": "TPUQ_FLEET_JOIN_S",
    "fleet_agent_database_url": "TPUQ_FLEET_AGENT_DATABASE_URL",
    "fleet_pip_spec": "TPUQ_FLEET_PIP_SPEC",
    "fleet_startup_script": "TPUQ_FLEET_STARTUP_SCRIPT",
    "notify_allow": "TPUQ_NOTIFY_ALLOW",
    "log_keep_days": "TPUQ_LOG_KEEP_DAYS",
    "log_budget_bytes": "TPUQ_LOG_BUDGET_BYTES",
    "log_stream_budget_bytes": "TPUQ_LOG_STREAM_BUDGET_BYTES",
    "disk_min_free_bytes": "TPUQ_DISK_MIN_FREE_BYTES",
    "log_check_s": "TPUQ_LOG_CHECK_S",
    "web_host": "TPUQ_WEB_HOST",
    "web_port": "TPUQ_WEB_PORT",
    "web_secret": "TPUQ_WEB_SECRET",
    "web_session_h": "TPUQ_WEB_SESSION_H",
    "web_metrics_token": "TPUQ_WEB_METRICS_TOKEN",
    "checkpoint_root": "TPUQ_CHECKPOINT_ROOT",
    "checkpoint_wait_s": "TPUQ_CHECKPOINT_WAIT_S",
    "gang_stop_s": "TPUQ_GANG_STOP_S",
    "handover_s": "TPUQ_HANDOVER_S",
    "announce_dir": "TPUQ_ANNOUNCE_DIR",
}
CONFIG_ENV = "TPUQ_CONFIG"
# the VM's own settings, an admin's (TPUQ_HOME once for everyone): read before the user's
SYSTEM_CONFIG_ENV = "TPUQ_SYSTEM_CONFIG"
SYSTEM_CONFIG = "/etc/tpuq/config.toml"
# characters of a path that urlsplit does not keep as they are in a URL's path
_URL_SPECIAL = frozenset("?#\t\r\n")
# settings that take one of a few words
CHOICES: dict[str, tuple[str, ...]] = {"run_as": ("agent", "owner")}


def _default_home() -> str:
    xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                           "share")
    return os.path.join(xdg, "tpuq")


def _host_name() -> str:
    import socket

    return socket.gethostname()


class Settings(Record, frozen=True):
    """Every setting in effect (ENV names each one's variable; docs/reference.md)."""

    home: str = field(default_factory=_default_home)
    database_url: str = ""  # empty = embedded SQLite under home
    broker_url: str = ""  # empty = embedded (no broker; the agent socket is the doorbell)
    host: str = field(default_factory=_host_name)
    device_glob: str = "/dev/accel*,/dev/vfio/[0-9]*"
    tpu_type: str = ""  # empty = detect from PCI ids / metadata
    libtpu_lockfile: str = "/tmp/libtpu_lockfile"
    tpu_logs_dir: str = "/tmp/tpu_logs"
    lock_dir: str = ""  # empty = <home>/locks
    metadata_url: str = ""  # empty = no metadata server (off GCP)
    boot_id_file: str = "/proc/sys/kernel/random/boot_id"
    # with the state directory, what tells one agent from another of the same host name
    machine_id_file: str = "/etc/machine-id"
    pci_dir: str = "/sys/bus/pci/devices"
    tcmalloc_path: str = "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"
    team: str = "default"
    user: str = ""  # empty = the login name
    heartbeat_s: float = 2.0
    lease_s: float = 30.0
    # the scheduler leader's lease: a dead leader is replaced within 4/3 of it
    leader_lease_s: float = 6.0
    host_stale_s: float = 30.0
    poll_s: float = 2.0
    default_grace_s: float = 30.0
    retry_backoff_s: float = 10.0
    port_base: int = 8500  # above libtpu's own ports; 2 per chip (environment.py)
    fair_share_half_life_h: float = 168.0
    broker_visibility_s: float = 3600.0  # Redis re-delivery timeout; irrelevant with early acks
    maintenance_lead_s: float = 300.0  # preempt this long before an announced window
    agent_socket: str = ""  # empty = <home>/agent.sock
    # requests the agent's socket answers at once, all users / one user; more: "busy"
    agent_connections: int = 64
    agent_connections_per_user: int = 8
    # whose account a job runs under: the agent's, or (a root agent) its owner's
    run_as: str = "agent"
    # owner mode never runs a job as an account below this uid (system accounts)
    run_as_min_uid: int = 1000
    # one attempt's output kept on disk; what is over is dropped, and the log says so
    log_max_bytes: int = 1024**3
    # job logs an agent keeps (agent/duties/logkeeper.py): an ended attempt's log and its Redis
    # stream for this many days; each user's logs on one host's disk up to this many bytes
    # (the oldest ended attempts' go first; a running attempt's never); the ended
    # attempts' streams one host shipped to Redis up to this many bytes; and a host with
    # less free disk than this under TPUQ_HOME takes no work. Checked this often.
    log_keep_days: float = 30.0
    log_budget_bytes: int = 20 * 1024**3
    log_stream_budget_bytes: int = 1024**3
    disk_min_free_bytes: int = 2 * 1024**3
    log_check_s: float = 60.0
    # a worker of a multi-host slice (pod): from the metadata server on GCP, or these
    slice_name: str = ""  # the TPU node's name; empty = from metadata, else not a slice
    slice_worker: int = -1  # this host's worker number; -1 = from metadata
    slice_type: str = ""  # the slice's accelerator type (v4-32); empty = from metadata
    # a slice job's workers must all be ready this long after its assignment, or it is
    # requeued (not charged)
    gang_start_s: float = 120.0
    # JAX_COORDINATOR_PORT of slice jobs: 8476 is open in GCP's default TPU firewall;
    # JAX >= 0.8.1's own default, 8482, is not (jax#35905)
    coordinator_port: int = 8476
    # what a submit tells its owner of by default (`tpuq submit --notify`, --notify-to):
    # events from end, fail, preempt (empty with a destination: end), Apprise URLs
    notify: str = ""
    notify_to: str = ""
    # `preempt` tells once, when a job's preemptions exceed this
    notify_preempts: int = 3
    # agents look for notifications to send this often, and try a failing one this many
    # times, waiting notify_retry_s, doubling, in between
    notify_poll_s: float = 2.0
    notify_tries: int = 8
    notify_retry_s: float = 30.0
    # a job requeued for host problems (the TPU did not start, its host vanished) this
    # many times in a row fails at the next one, with the runtime's message: no silent loop
    host_error_retries: int = 3
    # after a kill, how long the agent waits for every process to let go of the chips
    # before the next job may start (vfio devices can take seconds to release)
    chip_release_s: float = 60.0
    # how long a /proc scan that found the chips free is trusted while inotify shows no
    # open since (agent/tpu/devwatch.py); a container's own device node is invisible to it
    devwatch_trust_s: float = 10.0
    # what proves a chip shape on this host (agent/tpu/probes.py): "auto" (JAX lists its
    # local devices, on a host whose TPU PCI devices are known), "off", or a command
    # line run in a job's environment for that shape
    probe_command: str = "auto"
    probe_timeout_s: float = 300.0
    # transparent hugepages: the agent warns at start unless this says [always]
    thp_file: str = "/sys/kernel/mm/transparent_hugepage/enabled"
    # the fleet controller (tpuq fleet controller, docs/fleet.md): the Cloud TPU API's
    # endpoint (empty = Google's; plain http only on loopback, for a fake); how often it
    # looks; its per-slot backoff after a failed create (doubling, jittered, capped); how
    # long a READY VM's agent may take to register before status says so
    tpu_api_endpoint: str = ""
    fleet_poll_s: float = 10.0
    fleet_backoff_s: float = 30.0
    fleet_backoff_max_s: float = 1800.0
    fleet_join_s: float = 900.0
    # what new VMs get in their metadata to join the deployment: the database URL their
    # agents use (empty = the controller's own), what they pip install, and the startup
    # script (empty = the one shipped with tpuq, workers/startup-script.sh)
    fleet_agent_database_url: str = ""
    fleet_pip_spec: str = ""
    fleet_startup_script: str = ""
    # where notifications may go although it is this host (loopback), link-local (the
    # metadata server) or the deployment's database or broker host: networks, addresses
    # or host names (tpuq/destinations.py). Empty: none of those.
    notify_allow: str = ""
    # `tpuq web`: where it listens (loopback unless told), how long a sign-in lasts, the
    # key that signs its session cookies (empty: a new one per start, which signs
    # everyone out on a restart), and the bearer token /metrics wants (empty: open
    # while listening on loopback, refused elsewhere)
    web_host: str = "127.0.0.1"
    web_port: int = 8765
    web_secret: str = ""
    web_session_h: float = 12.0
    web_metrics_token: str = ""
    # where every host keeps job checkpoints: a shared path (an NFS mount, the same on
    # every host) or a gs:// URL, making TPUQ_CHECKPOINT_DIR the same for every attempt
    # on every host; empty = under each host's own TPUQ_HOME (docs/checkpoints.md)
    checkpoint_root: str = ""
    # host-local checkpoints: a requeued job waits this long for the host holding them
    # (while it is expected back) before it starts over elsewhere
    checkpoint_wait_s: float = 600.0
    # a slice job's workers get this long between the stop signal and SIGKILL when a
    # worker was lost or failed (no collective save can complete without it); a notice,
    # cancel or time limit gives them the job's full grace
    gang_stop_s: float = 5.0
    # a hand-over (SIGUSR2): running jobs wait this long for a new agent to adopt them
    handover_s: float = 300.0
    # where each agent leaves a small world-readable note of the TPUQ_HOME it serves, so
    # that a user whose settings name no running agent is told which one runs on the VM
    # (tpuq/announce.py); an admin makes it once, world-writable and sticky as /tmp
    announce_dir: str = "/run/tpuq"

    # ---- derived -------------------------------------------------------------------
    @property
    def embedded(self) -> bool:
        return not self.broker_url

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{os.path.join(self.home, 'tpuq.db')}"

    @property
    def socket_path(self) -> str:
        """The local agent's Unix socket: submits and rings from this VM go through it."""
        return self.agent_socket or os.path.join(self.home, "agent.sock")

    @property
    def socket_deployment(self) -> str | None:
        """The deployment a request on the agent socket names. None (whatever the agent
        serves) when this shell names the socket but no database: a login shell on a team
        TPU VM (/etc/profile.d/tpuq.sh), where the host's agent is the queue meant."""
        if self.agent_socket and not self.database_url:
            return None
        return self.deployment

    @property
    def deployment(self) -> str:
        """Which queue this is: the database's location, without user or password.

        The CLI sends it with every request on the agent socket, and an agent of another
        deployment (a personal embedded agent, a team agent of another database) refuses.
        """
        if not self.database_url and not _URL_SPECIAL.intersection(self.home):
            # the embedded default, sqlite:/// and a path: what urlsplit reads of it
            # (tests/unit/test_settings.py), without loading urllib for every submit
            return f"sqlite:{os.path.realpath(os.path.join(self.home, 'tpuq.db'))}"
        from urllib.parse import urlsplit

        url = urlsplit(self.db_url)
        scheme = url.scheme.split("+", 1)[0]
        if scheme == "sqlite":
            return f"sqlite:{os.path.realpath(url.path[1:])}" if url.path[1:] else "sqlite:"
        port = url.port or (5432 if scheme == "postgresql" else "")
        where = f"{(url.hostname or '').lower()}:{port}"
        return f"{scheme}://{where}{url.path}" + (f"?{url.query}" if url.query else "")

    @property
    def logs_dir(self) -> str:
        return os.path.join(self.home, "logs")

    @property
    def checkpoints_dir(self) -> str:
        return os.path.join(self.home, "checkpoints")

    @property
    def chip_lock_dir(self) -> str:
        return self.lock_dir or os.path.join(self.home, "locks")

    def in_effect(self) -> dict[str, str]:
        """The settings whose empty value stands for one derived from others, with the
        value in effect (`tpuq config` shows these, not an empty value)."""
        return {
            "database_url": f"{self.db_url} (embedded)",
            "broker_url": "(embedded: none)",
            "lock_dir": self.chip_lock_dir,
            "agent_socket": self.socket_path,
            "user": self.user_name,
            "checkpoint_root": f"{self.checkpoints_dir} (on each host)",
            "tpu_type": "(detected by the agent)",
        }

    @property
    def user_name(self) -> str:
        if self.user:
            return self.user
        from tpuq.users import login_name

        return login_name()


class SettingsError(TpuqError, ValueError):
    """A configuration value that cannot be used; the message names the source."""


def _coerce(name: str, raw: Any, source: str) -> Any:
    kind = Settings.field_kinds()[name]
    try:
        if kind == "float":
            value = float(raw)
            if not math.isfinite(value):
                raise ValueError(raw)
            return value
        if kind == "int":
            return int(raw)
    except (TypeError, ValueError):
        raise SettingsError(f"{source}: {name} must be a number, got {raw!r}") from None
    if name in ("notify_to", "notify_allow") and isinstance(raw, list):  # a TOML list
        return "\n".join(map(str, raw))
    if name in CHOICES and str(raw) not in CHOICES[name]:
        words = " or ".join(repr(c) for c in CHOICES[name])
        raise SettingsError(f"{source}: {name} must be {words}, got {raw!r}")
    return str(raw)


# Paths here are strings (os.path), not pathlib's: pathlib and what it loads (urllib.parse,
# ipaddress, fnmatch) were a tenth of a plain `tpuq submit`'s wall time.
def system_config_file(environ: dict[str, str]) -> str:
    return environ.get(SYSTEM_CONFIG_ENV) or SYSTEM_CONFIG


def user_config_file(environ: dict[str, str], home: str | None = None) -> str:
    """TPUQ_CONFIG, else config.toml in TPUQ_HOME (the environment's, else `home`, the
    system file's, else the default)."""
    if environ.get(CONFIG_ENV):
        return environ[CONFIG_ENV]
    return os.path.join(environ.get(ENV["home"]) or home or _default_home(), "config.toml")


def is_file(path: str) -> bool:
    """Whether `path` is a regular file, as pathlib answers it: a path that is missing or
    runs through something that is not a directory is no file; any other fault (a
    directory this user may not search) is raised, not read as "no file"."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            return False
        raise
    except ValueError:  # a NUL in the path
        return False


def toml_reader() -> Any:
    """The TOML reader: the standard library's from Python 3.11, `tomli` (the same code,
    a dependency for older Pythons) on 3.10, which TPU VM images (Ubuntu 22.04) run."""
    if sys.version_info >= (3, 11):
        import tomllib  # novm: 3.11+ only, guarded above

        return tomllib
    import tomli

    return tomli


def load(environ: dict[str, str] | None = None) -> Settings:
    """Defaults, then the TOML config file (if any), then TPUQ_* environment variables."""
    return load_with_sources(environ)[0]


def load_with_sources(environ: dict[str, str] | None = None
                      ) -> tuple[Settings, dict[str, str]]:
    """The settings and, for each, where its value came from: "default", a config
    file's path (the system's, then the user's), or the environment variable's name
    (`tpuq config`)."""
    env = dict(os.environ if environ is None else environ)
    values: dict[str, Any] = {}
    sources = dict.fromkeys(ENV, "default")
    system = system_config_file(env)
    for key, raw in _read_config(system).items():
        values[key] = _coerce(key, raw, system)
        sources[key] = system
    user = user_config_file(env, values.get("home"))
    if user != system:
        for key, raw in _read_config(user).items():
            values[key] = _coerce(key, raw, user)
            sources[key] = user
    for name, var in ENV.items():
        if env.get(var):
            values[name] = _coerce(name, env[var], var)
            sources[name] = var
    settings = Settings(**values)
    problem = check(settings)
    if problem:
        raise SettingsError(problem)
    return settings, sources


def _read_config(path: str) -> dict[str, Any]:
    """A config file's settings ({} when there is none). The file is hostile input: any
    fault in it is one line naming it."""
    try:
        present = is_file(path)
    except OSError as e:  # e.g. a HOME of another user's (sudo -u keeps HOME)
        raise SettingsError(f"cannot read config file {path}: {e.strerror} "
                            f"(set {ENV['home']} or {CONFIG_ENV})") from None
    if not present:
        return {}
    toml = toml_reader()
    try:
        with open(path, encoding="utf-8") as f:
            data: dict[str, Any] = toml.loads(f.read())
    except UnicodeDecodeError:
        raise SettingsError(f"cannot read config file {path}: it is not UTF-8 text") from None
    except (OSError, toml.TOMLDecodeError) as e:
        raise SettingsError(f"cannot read config file {path}: {e}") from None
    for key, raw in data.items():
        if key not in ENV:
            import difflib

            close = difflib.get_close_matches(key, list(ENV), n=1, cutoff=0.7)
            hint = f" (did you mean {close[0]!r}?)" if close else \
                " (`tpuq config` lists the settings)"
            raise SettingsError(f"{path}: unknown setting {key!r}{hint}")
        if isinstance(raw, dict) or isinstance(raw, bool) or (
                isinstance(raw, list) and key not in ("notify_to", "notify_allow")):
            raise SettingsError(f"{path}: {key} must be text or a number, got "
                                f"{type(raw).__name__} {raw!r}"[:300])
    return data


def check(s: Settings) -> str | None:
    """Why these settings cannot work together, in one line (naming the variables), or
    None when they can."""
    positive = ("heartbeat_s", "lease_s", "leader_lease_s", "host_stale_s", "poll_s",
                "fair_share_half_life_h", "broker_visibility_s", "gang_start_s",
                "notify_poll_s", "notify_tries", "probe_timeout_s", "fleet_poll_s",
                "fleet_backoff_s", "fleet_backoff_max_s", "fleet_join_s", "log_keep_days",
                "log_check_s", "web_session_h")
    for name in positive:
        if getattr(s, name) <= 0:
            return f"{ENV[name]} must be positive, got {getattr(s, name):g}"
    for name in ("default_grace_s", "retry_backoff_s", "maintenance_lead_s",
                 "notify_preempts", "notify_retry_s", "host_error_retries", "chip_release_s",
                 "devwatch_trust_s", "log_budget_bytes", "log_stream_budget_bytes",
                 "disk_min_free_bytes", "checkpoint_wait_s", "gang_stop_s", "handover_s"):
        if getattr(s, name) < 0:
            return f"{ENV[name]} cannot be negative, got {getattr(s, name):g}"
    if s.heartbeat_s >= s.lease_s:
        return (f"{ENV['heartbeat_s']} ({s.heartbeat_s:g}) must be shorter than "
                f"{ENV['lease_s']} ({s.lease_s:g}): a lease must outlive a heartbeat")
    if s.host_stale_s <= s.heartbeat_s:
        return (f"{ENV['host_stale_s']} ({s.host_stale_s:g}) must be longer than "
                f"{ENV['heartbeat_s']} ({s.heartbeat_s:g}), or every host looks dead")
    if s.notify_allow:
        from tpuq.destinations import parse_allow

        try:
            parse_allow(s.notify_allow)
        except ValueError as e:
            return f"{ENV['notify_allow']}: {e}"
    if not 0 <= s.web_port <= 65535:
        return f"{ENV['web_port']} must be between 0 and 65535, got {s.web_port}"
    from tpuq.checkpoints import check_root

    bad_root = check_root(s.checkpoint_root)
    if bad_root:
        return f"{ENV['checkpoint_root']}: {bad_root}"
    if not 1024 <= s.port_base <= 65535 - 64:
        return f"{ENV['port_base']} must be between 1024 and {65535 - 64}, got {s.port_base}"
    return None
