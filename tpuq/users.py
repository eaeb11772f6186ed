"""Who a user is, by name: the one place that turns a uid into a user name.

Stdlib only: the CLI, the agent's socket and the /proc scan all name users alike.
"""

from __future__ import annotations

import os
import pwd


def name_of(uid: int) -> str:
    """The account name of `uid`, or the number itself when it has no account here."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def login_name() -> str:
    """The name of the user running this process, as the shell says: what
    getpass.getuser() answers (LOGNAME, USER, LNAME, USERNAME, else the account of the
    real uid), without loading getpass, termios and warnings for every submit."""
    for var in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        name = os.environ.get(var)
        if name:
            return name
    return pwd.getpwuid(os.getuid()).pw_name
