"""Jobs queued from Python, as requests: a function call or a command each, one or a
whole sweep (`tpuq.client.submit`, `submit_command`, `submit_many` send them).

The options are `tpuq submit`'s (tpuq/submitopts.py maps them to a spec, for the CLI
too). A batch goes as few requests as fit in a message (protocol.MAX_MESSAGE), each one
transaction and one wake-up of the agents; what every job of a request shares (its
directory, environment, options) is sent once.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpuq.protocol import MAX_MESSAGE, SubmitMany
from tpuq.spec import JobSpec, SpecError
from tpuq.submitopts import Captured, SubmitOptions, resolve

if TYPE_CHECKING:
    from tpuq.settings import Settings

# room left in a message for the request's own fields and JSON's overhead
BATCH_BYTES = MAX_MESSAGE - 64 * 1024


@dataclass
class Pending:
    """One job of a batch, not sent yet: a function call or a command, and the options
    that are its own (a batch's options apply to the rest). Made by `call`/`command`."""

    fn: Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    argv: Sequence[str] = ()
    options: dict[str, Any] = field(default_factory=dict)


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Pending:
    """`fn(*args, **kwargs)` as one job of `submit_many`; keywords named as a submit
    option (chips=, name=, ...) are the job's options, the rest the function's."""
    names = SubmitOptions.names()
    return Pending(fn=fn, args=args, kwargs={k: v for k, v in kwargs.items() if k not in names},
                   options={k: v for k, v in kwargs.items() if k in names})


def command(argv: Sequence[str] | str, **options: Any) -> Pending:
    """A script or command as one job of `submit_many`: ["train.py", "--lr", "3e-4"]
    runs with this interpreter's python, as `tpuq submit train.py --lr 3e-4` does."""
    return Pending(argv=_words(argv), options=options)


def requests(jobs: Iterable[Pending], cfg: Settings, options: dict[str, Any]
             ) -> list[SubmitMany]:
    """The requests that queue `jobs` (`options` for all of them, a job's own winning),
    every job checked first; SpecError, in one line, for the first that cannot go."""
    common = SubmitOptions().merged(**options)
    envs: dict[tuple[tuple[str, ...], str], Captured] = {}  # one capture per kind
    items = [_item(p, common, cfg, envs) for p in jobs]
    return list(_batches(items))


def _words(argv: Sequence[str] | str) -> list[str]:
    if isinstance(argv, str):
        import shlex

        return shlex.split(argv)
    return [str(a) for a in argv]


def _item(p: Pending, common: SubmitOptions, cfg: Settings,
          envs: dict[tuple[tuple[str, ...], str], Captured]) -> dict[str, Any]:
    """The request's entry for one job: its spec, how it waits, its pickled call."""
    try:
        opts = common.merged(**p.options) if p.options else common
        key = (tuple(opts.env), opts.export)
        if key not in envs:
            envs[key] = opts.capture(os.environ)
        if p.fn is not None:
            spec = _function_spec(p.fn, opts, cfg, envs[key])
        else:
            spec = opts.spec(resolve(p.argv, opts.python), cfg, captured=envs[key])
        entry = opts.request(spec).as_dict()
    except TypeError as e:  # an option of the wrong kind, say chips="4"
        raise SpecError(f"bad submit option: {e}") from None
    if p.fn is not None:
        entry["function"] = _pickled(p.fn, p.args, p.kwargs)
    return {k: entry[k] for k in ("spec", "held", "after", "after_any", "function")}


def _function_spec(fn: Callable[..., Any], opts: SubmitOptions, cfg: Settings,
                   captured: Captured) -> JobSpec:
    from tpuq import runfn

    python = opts.python or sys.executable
    name = getattr(fn, "__qualname__", None) or "function"
    return opts.spec([python, "-m", runfn.MODULE], cfg, default_name=name, captured=captured)


def _pickled(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    import cloudpickle

    from tpuq import runfn

    try:
        data = cloudpickle.dumps((fn, args, kwargs))
    except Exception as e:  # noqa: BLE001 - whatever pickling raised, in one line
        raise SpecError(f"the function or its arguments cannot be pickled: {e}") from None
    refused = runfn.too_big(data)
    if refused:
        raise SpecError(refused)
    return base64.b64encode(data).decode()


def _batches(items: list[dict[str, Any]]) -> Iterable[SubmitMany]:
    """Requests of at most BATCH_BYTES each, in order; what every job of one request
    shares is sent once, in `common`."""
    batch: list[dict[str, Any]] = []
    size = 0
    for item in items:
        n = len(json.dumps(item, default=str))
        if batch and size + n > BATCH_BYTES:
            yield _request(batch)
            batch, size = [], 0
        batch.append(item)
        size += n
    if batch:
        yield _request(batch)


def _request(batch: list[dict[str, Any]]) -> SubmitMany:
    first = batch[0]["spec"]
    common = {k: v for k, v in first.items() if all(i["spec"].get(k) == v for i in batch)}
    jobs = [{**i, "spec": {k: v for k, v in i["spec"].items() if k not in common}}
            for i in batch]
    return SubmitMany(common=common, jobs=jobs)


__all__ = ["Pending", "call", "command", "requests"]
