"""Which workers make up the pod, in worker order (host 0 first).

Where the list comes from, the first that answers wins:

1. `--hosts`: a file (one host per line) or a comma-separated list;
2. the metadata server named by `TPUQ_METADATA_URL`, when set;
3. a hosts file kept by habit (`~/podips.txt`, tpu-starter's `podrun`), when it exists;
4. the GCE metadata server at its usual address.

From metadata: `instance/attributes/worker-network-endpoints` holds comma-separated
entries, `name:id:ip` or (newer) plain hostnames, in worker order (jax
`_src/clusters/cloud_tpu_cluster.py` reads both), and
`agent-worker-number` says which worker this machine is. A configured server is the
deployment's word; otherwise a file the user keeps beats a guess at the usual address.

A host entry is `[user@]host[:port]` (`[v6addr]:port` for IPv6). In a file, `#` starts a
comment. The podips.txt habit lists the *other* workers: a list that names no address of
this machine gets this machine prepended as worker 0 (reached over SSH like the others,
so every worker runs the same way), unless the caller asks for the listed hosts only.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass

from tpuq.errors import TpuqError

DEFAULT_HOSTS_FILE = "~/podips.txt"
GCE_METADATA_URL = "http://metadata.google.internal/computeMetadata/v1/"
THIS_MACHINE = "127.0.0.1"  # how worker 0 is reached when a list leaves it out

_HOST = re.compile(r"^[A-Za-z0-9_.-]+$")


class HostsError(TpuqError, ValueError):
    """The workers cannot be known: a bad hosts file or list, or nothing to ask."""


@dataclass(frozen=True)
class Worker:
    """One worker of the pod: its index (`w0` is host 0) and how to reach it."""

    index: int
    host: str
    user: str | None = None
    port: int | None = None

    @property
    def name(self) -> str:
        return f"w{self.index}"

    @property
    def address(self) -> str:
        """`[user@]host[:port]` as written in a hosts file."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return (f"{self.user}@" if self.user else "") + host + (f":{self.port}" if self.port else "")

    def as_dict(self) -> dict[str, object]:
        return {"worker": self.index, "name": self.name, "host": self.host, "user": self.user,
                "port": self.port}


@dataclass(frozen=True)
class Pod:
    """The workers in order, where the list came from, and (from metadata) which worker
    this machine is."""

    workers: tuple[Worker, ...]
    source: str
    this_worker: int | None = None
    note: str = ""


def parse_entry(text: str, where: str) -> tuple[str, str | None, int | None]:
    """(host, user, port) of `[user@]host[:port]`; HostsError naming `where`."""
    entry = text.strip()
    user, at, rest = entry.rpartition("@")
    if at and not user:
        raise HostsError(f"{where}: empty user in {entry!r}")
    port_text = ""
    if rest.startswith("["):  # [v6]:port
        host, close, tail = rest[1:].partition("]")
        if not close or (tail and not tail.startswith(":")):
            raise HostsError(f"{where}: cannot read {entry!r} (expected [ADDRESS]:PORT)")
        port_text = tail[1:]
    elif rest.count(":") > 1:  # a bare IPv6 address, no port
        host = rest
    else:
        host, _, port_text = rest.partition(":")
    if not host or not (_HOST.match(host) or _is_ip(host)):
        raise HostsError(f"{where}: {entry!r} is not a host (expected [USER@]HOST[:PORT])")
    port = None
    if port_text:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise HostsError(f"{where}: bad port in {entry!r}")
        port = int(port_text)
    return host, user or None, port


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def parse_lines(text: str, source: str) -> list[tuple[str, str | None, int | None]]:
    """Entries of a hosts file: one per line, `#` comments and blank lines skipped."""
    entries = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line.split()) > 1:
            raise HostsError(f"{source}:{n}: one host per line, got {line!r}")
        entries.append(parse_entry(line, f"{source}:{n}"))
    if not entries:
        raise HostsError(f"{source}: names no host")
    return entries


def parse_list(text: str) -> list[tuple[str, str | None, int | None]]:
    """Entries of `--hosts a,b,c`."""
    items = [t.strip() for t in text.split(",")]
    if not all(items):
        raise HostsError(f"--hosts {text!r}: an empty entry (expected HOST,HOST,...)")
    return [parse_entry(t, "--hosts") for t in items]


def parse_endpoints(raw: str) -> list[str]:
    """Worker addresses from `worker-network-endpoints`, in worker order: `name:id:ip`
    entries or plain hostnames (agent/gce/topology.py reads both)."""
    from tpuq.agent.gce.topology import endpoint_hosts

    try:
        return endpoint_hosts(raw)
    except ValueError as e:
        raise HostsError(f"metadata {e}") from None


def is_this_machine(host: str) -> bool:
    """Whether `host` is an address of this machine: one a socket can bind here."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except OSError:
        return False
    for family, _, _, _, addr in infos:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            try:
                s.bind((addr[0], 0))
            except OSError:
                continue
            return True
    return False


def _workers(entries: list[tuple[str, str | None, int | None]], source: str, listed_only: bool,
             is_local: Callable[[str], bool]) -> Pod:
    note = ""
    if not listed_only and not any(is_local(host) for host, _, _ in entries):
        entries = [(THIS_MACHINE, None, None), *entries]
        note = f"{source} does not name this machine: it is w0 (the podips.txt habit)"
    workers = tuple(Worker(i, h, u, p) for i, (h, u, p) in enumerate(entries))
    return Pod(workers, source, note=note)


def _read_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError:
        raise HostsError(f"{path}: not a text file of hosts") from None
    except OSError as e:
        raise HostsError(f"cannot read hosts file {path}: {e.strerror}") from None


def looks_like_file(value: str) -> bool:
    """`--hosts` names a file (a path, or a file that exists), not HOST,HOST,..."""
    return (os.sep in value or value.startswith("~") or value.endswith(".txt")
            or os.path.isfile(value))


def from_option(value: str, listed_only: bool = False,
                is_local: Callable[[str], bool] = is_this_machine) -> Pod:
    """The workers `--hosts` names: a file or a comma-separated list."""
    if looks_like_file(value):
        path = os.path.expanduser(value)
        return _workers(parse_lines(_read_file(path), path), path, listed_only, is_local)
    return _workers(parse_list(value), "--hosts", listed_only, is_local)


def from_metadata(base_url: str, timeout_s: float = 2.0) -> Pod | None:
    """The pod as the metadata server describes it, or None where it does not answer."""
    from tpuq.agent.gce.metadata import read_topology

    topo = read_topology(base_url, timeout_s=timeout_s)
    raw = topo.get("worker_network_endpoints")
    if not raw:
        return None
    ips = parse_endpoints(raw)
    me = topo.get("agent_worker_number")
    note = f"this machine is w{me}, not host 0" if me not in (None, 0) else ""
    return Pod(tuple(Worker(i, ip) for i, ip in enumerate(ips)), f"metadata {base_url}",
               this_worker=me, note=note)


def discover(hosts: str | None, metadata_url: str, listed_only: bool = False,
             default_file: str = DEFAULT_HOSTS_FILE) -> Pod:
    """The pod's workers, host 0 first (module doc: which source wins)."""
    if hosts:
        return from_option(hosts, listed_only)
    if metadata_url:
        pod = from_metadata(metadata_url)
        if pod is not None:
            return pod
    path = os.path.expanduser(default_file)
    if os.path.isfile(path):
        return from_option(path, listed_only)
    if not metadata_url:
        pod = from_metadata(GCE_METADATA_URL)
        if pod is not None:
            return pod
    raise HostsError(f"no workers: the metadata server ({metadata_url or GCE_METADATA_URL}) "
                     f"names none and {default_file} does not exist; pass --hosts FILE or "
                     "--hosts HOST,HOST,...")
