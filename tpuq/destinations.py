"""Where a notification may go: the one rule, for the submit that names a destination
and for the process that connects to it (tpuq/agent/duties/courier.py).

A job's owner names its destinations (Apprise URLs), and an agent connects to them: so
by default nothing on the host itself (loopback, the unspecified address), nothing
link-local (169.254.169.254 is the metadata server, which hands out the VM's service
account tokens) and neither the deployment's database nor its broker host. Admins allow
more with the `notify_allow` setting: networks (CIDR), addresses or host names.

The check at submit names the refusal in one line before anything is queued; it can
only see a destination whose URL names a host (slack://TokenA/... names none, and a
token is never looked up in DNS). The check that holds is the courier's: it applies
the same rule to every address the sender actually connects to, after DNS and after
any redirect. Stdlib only.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tpuq.errors import TpuqError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
ALLOW_SETTING = "notify_allow"


class Refused(TpuqError, ValueError):
    """A destination the rule refuses; the message is one line."""


def parse_allow(text: str) -> tuple[list[Network], list[str]]:
    """`notify_allow` (entries separated by commas or white space) as networks and host
    names; ValueError naming the first entry that is neither."""
    networks: list[Network] = []
    names: list[str] = []
    for entry in text.replace(",", " ").split():
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
            continue
        except ValueError:
            pass
        name = entry.lower().rstrip(".")
        labels = name.split(".")
        if not all(lab and len(lab) < 64 and lab.replace("-", "").isalnum() for lab in labels):
            raise ValueError(f"{entry!r} is neither a network (10.0.0.0/8), an address nor "
                             "a host name")
        names.append(name)
    return networks, names


def _address(text: str) -> Address | None:
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def numeric(host: str) -> list[Address]:
    """The address `host` is written as (also 2130706433 and 127.1, which resolvers
    read as 127.0.0.1), without asking DNS; [] for a name."""
    try:
        infos = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError, ValueError):
        return []
    return [a for a in (_address(str(i[4][0])) for i in infos) if a is not None]


def resolve(host: str) -> list[Address]:
    """Every address `host` resolves to; [] when it does not (here)."""
    try:
        infos = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError, OSError):
        return []
    return [a for a in (_address(str(i[4][0])) for i in infos) if a is not None]


def own_services(database_url: str, broker_url: str) -> list[tuple[str, str]]:
    """The deployment's database and broker as (what, //host): no user, no password."""
    out = []
    for what, url in (("database", database_url), ("broker", broker_url)):
        host = url_host(url)
        if host:
            out.append((what, f"//{host}"))
    return out


def url_host(url: str) -> str:
    """The host part of a URL ("" when it has none), without user, password or port."""
    try:
        return (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:
        return ""


@dataclass(frozen=True)
class Rule:
    """Addresses refused unless allowed; `own` maps the deployment's database and broker
    addresses (and host names) to what they are."""

    allow_networks: Sequence[Network] = ()
    allow_names: Sequence[str] = ()
    own: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, allow: str, own_urls: Iterable[tuple[str, str]]) -> Rule:
        """The rule for `notify_allow` and the deployment's own services, given as
        (what, URL) (own_services)."""
        networks, names = parse_allow(allow)
        own: dict[str, str] = {}
        for what, url in own_urls:
            host = url_host(url)
            if not host:
                continue
            own.setdefault(host, f"the deployment's {what} host")
            for ip in numeric(host) or resolve(host):
                own.setdefault(str(ip), f"the deployment's {what} host")
        return cls(tuple(networks), tuple(names), own)

    def allowed_name(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.allow_names

    def why_not(self, ip: Address) -> str | None:
        """Why a connection to `ip` is refused, or None when it may go there."""
        if any(ip in net for net in self.allow_networks):
            return None
        if ip.is_loopback or ip.is_unspecified:
            return "a loopback address (this host itself)"
        if ip.is_link_local:
            return "a link-local address (where the metadata server answers)"
        return self.own.get(str(ip))

    def check_url(self, url: str) -> None:
        """Refused (one line) when the URL names a host the rule refuses: by its name, or
        by the address it is written as or resolves to. A host part that is no name with
        a dot (a token: slack://TokenA/...) is not looked up."""
        host = url_host(url)
        if not host or self.allowed_name(host):
            return
        shown = f"{url.split('://', 1)[0]}://{host}"
        found = numeric(host)
        if not found and host in self.own:  # by its name (an address: allow may cover it)
            raise Refused(f"--notify-to {shown}: {host} is {self.own[host]}; {_HINT}")
        if not found and (host == "localhost" or host.endswith(".localhost")):
            found = [ipaddress.IPv4Address("127.0.0.1")]
        elif not found and "." in host:
            found = resolve(host)
        for ip in found:
            why = self.why_not(ip)
            if why:
                is_ = "is" if str(ip) == host else f"resolves to {ip},"
                raise Refused(f"--notify-to {shown}: {host} {is_} {why}; {_HINT}")


_HINT = (f"notifications go to no such place unless an admin allows it ({ALLOW_SETTING} in "
         "the deployment's configuration)")
