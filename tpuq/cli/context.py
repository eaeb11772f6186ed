"""What every command needs: settings, the client, the JSON switch.

Click-free (the option is made where a command is declared): `tpuq submit`'s own reader
(cli/quick.py) runs the command without loading Click.
"""

from __future__ import annotations

import json
import sys

from tpuq import settings as settings_mod

TYPE_CHECKING = False  # typing costs an import; the type checker reads this as True
if TYPE_CHECKING:
    from typing import Any, TypeVar

    from tpuq.client import Client
    from tpuq.protocol import Reply, Request
    from tpuq.settings import Settings
    from tpuq.state.db import Database

    R = TypeVar("R", bound=Reply)

_client: Client | None = None


def settings() -> Settings:
    return settings_mod.load()


def client() -> Client:
    """This process's client (one per command: it keeps its database open, if any)."""
    global _client
    if _client is None:
        from tpuq.client import Client

        _client = Client(settings())
    return _client


def ask(req: Request, expect: type[R]) -> R:
    """The reply to `req` of the kind expected; a refusal becomes the one error line."""
    return client().ask(req, expect)


def agent_elsewhere() -> str | None:
    """When this command read or wrote an embedded queue no agent serves while an agent
    of another TPUQ_HOME runs on this VM: a note naming that TPUQ_HOME."""
    c = client()
    if not c.settings.embedded or c.via_agent is not False:
        return None
    from tpuq import announce

    said = announce.hint(c.settings)
    return f"note: {said}" if said else None


def database(cfg: Settings) -> Database:
    """The configured database, schema checked: for commands that run tpuq itself
    (agent, db). The embedded default creates and upgrades itself on first use; a
    database named explicitly is only ever changed by `tpuq db upgrade`."""
    from tpuq.state.db import open_database

    return open_database(cfg, auto_upgrade=not cfg.database_url)


def echo_json(data: Any) -> None:
    """`data` as JSON: an object indented, a list one compact item per line (a listing of
    10,000 jobs: json's indenting encoder is pure Python, and took most of the
    command's time; the compact one is C)."""
    if not isinstance(data, list):
        echo(json.dumps(data, indent=2, sort_keys=True, default=str))
        return
    encode = json.JSONEncoder(sort_keys=True, default=str).encode
    echo("[\n" + ",\n".join(encode(item) for item in data) + "\n]" if data else "[]")


def echo(line: str, err: bool = False) -> None:
    """One line of the command's output (stderr: `err`), written at once: nowhere when
    the stream is closed (`>&-`), as UTF-8 bytes when its encoding cannot hold it."""
    out = sys.stderr if err else sys.stdout
    if out is None:
        return
    try:
        out.write(line + "\n")
    except UnicodeEncodeError:
        out.flush()
        out.buffer.write(line.encode("utf-8", "replace") + b"\n")
    out.flush()


def json_option(f: Any) -> Any:
    import click

    return click.option("--json", "as_json", is_flag=True, envvar="TPUQ_JSON",
                        help="Print JSON for scripts instead of a table.")(f)
