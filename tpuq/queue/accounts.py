"""Users' broker accounts: a Redis ACL user per person, that reads their own jobs' log
streams and can do nothing else.

What a user needs of the broker off the hosts is `tpuq logs ID -f`: their jobs' output,
shipped to `tpuq:logs:<owner>:...` (queue/logstream.py). Wake-ups from a laptop go through
the database (state/wakeups.py), so a user's account may not publish, subscribe, write,
list keys, or touch Celery's queues and its remote-control channel: it cannot stop or
reconfigure an agent's consumer, and what it reads is read-only and its own.

The accounts live in the database (`broker_accounts`: name and the password's SHA-256,
never the password), made by `tpuq user add`; every agent makes Redis agree with that
table (`sync`), so a broker restarted empty, as the deployment's broker is run (no
persistence), has them back within a sync. Accounts this module made are told apart
from an admin's own by their key pattern; only those are ever removed.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from tpuq.queue import logstream

log = logging.getLogger("tpuq.queue")
# what `tpuq logs` runs against Redis (logstream.read_after: XRANGE) and what redis-py
# may send on connecting (SELECT for a database other than 0; AUTH and HELLO are always
# allowed); nothing else
COMMANDS = ("xrange", "xread", "ping", "select")
MARK = f"%R~{logstream.PREFIX}"  # the key pattern of every account made here


def password_hash(password: str) -> str:
    """What Redis keeps of a password (ACL SETUSER #<sha256>), and the database too."""
    return hashlib.sha256(password.encode()).hexdigest()


def rules(name: str, sha256: str) -> list[str]:
    """ACL SETUSER rules of `name`'s account: its password, read-only on its own jobs'
    log streams, no channels, no command but COMMANDS."""
    return ["reset", "on", f"#{sha256}", f"%R~{logstream.pattern(name)}", "resetchannels",
            "-@all", *(f"+{c}" for c in COMMANDS)]


def _made_here(line: str) -> tuple[str, str] | None:
    """(name, password hash) of an `ACL LIST` line of an account made here, else None."""
    words = line.split()
    if len(words) < 2 or words[0] != "user" or not any(w.startswith(MARK) for w in words):
        return None
    hashes = [w[1:] for w in words if w.startswith("#")]
    return words[1], (hashes[0] if len(hashes) == 1 else "")


def _want(name: str, sha256: str) -> set[str]:
    return {"user", name, *(r for r in rules(name, sha256) if r != "reset")}


def sync(client: Any, accounts: dict[str, str]) -> tuple[list[str], list[str]]:
    """Make the broker's accounts made here be `accounts` (name -> password hash):
    (made or changed, removed)."""
    lines = [x.decode() if isinstance(x, bytes) else str(x)
             for x in client.execute_command("ACL", "LIST")]
    have = {line.split()[1]: set(line.split()) - {"sanitize-payload"} for line in lines
            if line.startswith("user ")}
    ours = {found[0] for found in map(_made_here, lines) if found is not None}
    made = []
    for name, sha in sorted(accounts.items()):
        if have.get(name) != _want(name, sha):
            if name in have and name not in ours:
                log.warning("broker account %s exists and is not tpuq's: left as it is", name)
                continue
            client.execute_command("ACL", "SETUSER", name, *rules(name, sha))
            made.append(name)
    gone = sorted(ours - set(accounts))
    for name in gone:
        client.execute_command("ACL", "DELUSER", name)
    return made, gone


def user_url(broker_url: str, name: str, password: str) -> str:
    """The broker URL a user is given: the deployment's, with their account in it."""
    url = urlsplit(broker_url)
    where = url.hostname or "localhost"
    if ":" in where:
        where = f"[{where}]"
    if url.port:
        where += f":{url.port}"
    netloc = f"{quote(name, safe='')}:{quote(password, safe='')}@{where}"
    return urlunsplit((url.scheme, netloc, url.path, url.query, url.fragment))


def open_to_anyone(broker_url: str) -> bool:
    """Does the broker let in a client with no password (its default user is open)?
    Then every user reads every job's output and may stop every agent's consumer."""
    import redis

    from tpuq.queue.logstream import client

    url = urlsplit(broker_url)
    bare = urlunsplit((url.scheme, url.netloc.rsplit("@", 1)[-1], url.path, "", ""))
    try:
        client(bare).ping()
    except (redis.exceptions.AuthenticationError, redis.exceptions.ResponseError):
        return False
    except (redis.exceptions.RedisError, OSError):
        return False  # away: nothing to say now
    return True
