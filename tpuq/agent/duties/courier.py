"""One notification's delivery, in a process of its own: `python -m tpuq.agent.duties.courier`.

The agent (agent/duties/notifier.py) hands it destinations and messages on stdin and reads
one line back for each, as each is done: {"ok": true} or {"error": "..."}. A process of
its own because:

- the rule of where notifications may go (tpuq/destinations.py) holds for every
  connection Apprise makes, from whichever of its threads, after DNS and redirects:
  here every socket's connect is checked, which in the agent would touch its own
  database and broker connections too;
- Apprise logs what it cannot parse with the URL in full ("Could not load Slack URL:
  slack://..."): here its log goes nowhere but into the error line, and that line is
  scrubbed of every part of the destination before it leaves;
- a plugin that hangs or crashes costs this process, never the agent's sender.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import re
import socket
import sys
from typing import Any

from tpuq.destinations import ALLOW_SETTING, Rule, resolve

MAX_ERROR = 300
_SPLIT = re.compile(r"[/:@?&=#,;+\s]+")


def scrub(text: str, url: str) -> str:
    """`text` without the destination: the URL, and each part of it (user, password,
    host, tokens, query values) longer than 3 characters, as ***."""
    scheme, _, rest = url.partition("://")
    parts = sorted({p for p in _SPLIT.split(rest) if len(p) > 3} | {rest, url}, key=len,
                   reverse=True)
    for part in parts:
        if part:
            text = text.replace(part, "***")
    return text


def guard(rule: Rule) -> list[str]:
    """From now on, every connect of this process goes only where `rule` allows (and
    never to a Unix socket); the list returned fills with each refusal, in words.

    A refusal is a PermissionError (an OSError, as a refused connect is), so HTTP and
    SMTP clients report it as the connection failure it is, whichever thread made it.
    """
    allowed = list(rule.allow_networks)
    for name in rule.allow_names:
        allowed += [ipaddress.ip_network(ip) for ip in resolve(name)]
    rule = Rule(tuple(allowed), rule.allow_names, rule.own)
    refusals: list[str] = []
    plain_connect, plain_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def check(sock: socket.socket, address: Any) -> None:
        why: str | None
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            why = "refused a local socket: notifications go over the network only"
        else:
            ip = ipaddress.ip_address(str(address[0]).split("%", 1)[0])
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
                ip = ip.ipv4_mapped
            why = rule.why_not(ip)
            why = why and f"refused to connect to {ip}: {why} ({ALLOW_SETTING})"
        if why:
            refusals.append(why)
            raise PermissionError(errno.EACCES, why)

    def connect(sock: socket.socket, address: Any) -> None:
        check(sock, address)
        plain_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        check(sock, address)
        return plain_connect_ex(sock, address)

    socket.socket.connect = connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
    return refusals


def deliver(order: dict[str, Any]) -> str | None:
    """Send the message to the URL; None when it went, else why not (unscrubbed)."""
    import apprise

    sender = apprise.Apprise()
    if not sender.add(order["url"]):
        return "not a notification URL Apprise knows (see `apprise --details`)"
    heard: list[str] = []

    def keep(entry: Any, _plugin: Any) -> None:
        if str(getattr(entry, "level", "ERROR")).upper() in ("WARNING", "ERROR", "CRITICAL"):
            heard.append(str(getattr(entry, "message", entry)))

    ok = sender.notify(body=order["body"], title=order["title"], notify_type=order["kind"],
                       log_callback=keep)
    return None if ok else (heard or ["the destination refused it"])[-1]


def answer(order: dict[str, Any], refusals: list[str]) -> dict[str, Any]:
    """One delivery's line: sent, or why not, scrubbed of the destination."""
    url = str(order["url"])
    before = len(refusals)
    try:
        error = deliver(order)
    except Exception as e:  # noqa: BLE001 - a plugin's bug is one line, like any failure
        error = f"{type(e).__name__}: {e}"
    if error is None:
        return {"ok": True}
    if len(refusals) > before:
        error = refusals[-1]  # what the plugin made of the refusal says less
    first = error.strip().splitlines()[0] if error.strip() else "?"
    return {"error": scrub(first, url)[:MAX_ERROR]}


def main() -> int:
    # Apprise's own log lines name destinations in full: they reach no handler
    logging.getLogger().handlers.clear()
    logging.getLogger("apprise").propagate = False
    logging.getLogger("apprise").addHandler(logging.NullHandler())
    order = json.loads(sys.stdin.read())
    refusals = guard(Rule.of(order.get("allow", ""), order.get("own", [])))
    for delivery in order["deliveries"]:
        sys.stdout.write(json.dumps(answer(delivery, refusals)) + "\n")
        sys.stdout.flush()  # an agent that stops waiting keeps what is done
    return 0


if __name__ == "__main__":
    sys.exit(main())
