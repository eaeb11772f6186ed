"""tpuq.records.Record: what the settings, the job spec, the shapes and the socket's
messages rely on from it, as they relied on @dataclass."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest

from tpuq.records import Record, field

made: list[int] = []


def _next() -> int:
    made.append(len(made))
    return made[-1]


class Point(Record):
    x: int
    y: int = 0
    tags: list[str] = field(default_factory=list)
    seen: dict[str, int] = {}  # noqa: RUF012 - copied for each record
    serial: int = field(default_factory=_next)


class Frozen(Record, frozen=True):
    a: int
    b: str = "b"


class Child(Frozen, frozen=True):
    c: float = 1.5


def test_fields_in_order_by_position_or_keyword() -> None:
    assert Point(1, 2).as_dict() | {"serial": 0} == \
        {"x": 1, "y": 2, "tags": [], "seen": {}, "serial": 0}
    assert Point(y=3, x=4).x == 4
    assert Point.field_names() == ("x", "y", "tags", "seen", "serial")
    assert Child.field_names() == ("a", "b", "c")
    assert Child.field_kinds() == {"a": "int", "b": "str", "c": "float"}


def test_a_field_without_a_default_is_required_and_unknown_ones_are_refused() -> None:
    with pytest.raises(TypeError, match="x is required"):
        Point()
    with pytest.raises(TypeError, match="unknown fields z"):
        Point(1, z=2)
    with pytest.raises(TypeError, match="x given twice"):
        Point(1, x=2)
    with pytest.raises(TypeError, match="6 values for 5 fields"):
        Point(1, 2, [], {}, 3, 4)


def test_defaults_are_never_shared_and_factories_run_per_record() -> None:
    p, q = Point(1), Point(1)
    p.tags.append("t")
    p.seen["k"] = 1
    assert q.tags == [] and q.seen == {} and Point.__dict__["seen"] == {}
    assert q.serial == p.serial + 1


def test_frozen_records_refuse_assignment_and_hash_by_value() -> None:
    f = Child(1)
    with pytest.raises(AttributeError, match="frozen Child"):
        f.a = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del f.b  # type: ignore[misc]
    assert hash(f) == hash(Child(1)) and len({f, Child(1), Child(2)}) == 2
    with pytest.raises(TypeError):
        hash(Point(1))  # mutable: unhashable, as a dataclass


def test_equality_replace_repr_and_pickle() -> None:
    assert Child(1) == Child(1) and Child(1) != Child(2) and Frozen(1) != Child(1)
    g = Child(1).replace(c=2.0)
    assert (g.a, g.c) == (1, 2.0)
    assert repr(g) == "Child(a=1, b='b', c=2.0)"
    assert pickle.loads(pickle.dumps(g)) == g


# what a plain submit through the agent never loads: each cost a share of its wall time
# (bench/README.md) and the submit path has no use for it
NOT_ON_THE_SUBMIT_PATH = ("dataclasses", "inspect", "typing", "click", "pathlib",
                          "urllib.parse", "contextlib", "getpass", "shlex", "signal")


def test_the_submit_path_loads_none_of_what_it_does_without(tmp_path) -> None:
    """A plain submit through the agent (cli/quick.py), up to the moment it asks the
    agent (its settings, the line read, the spec made and checked, the request built),
    leaves these modules unloaded."""
    probe = (  # what the interpreter loaded before tpuq (a venv's .pth files) is not tpuq's
        "import sys\n"
        "before = set(sys.modules)\n"
        "from tpuq.cli import context, quick\n"
        "def ask(request, kind):\n"
        f"    print(sorted(set({NOT_ON_THE_SUBMIT_PATH!r}) & (set(sys.modules) - before)))\n"
        "    raise SystemExit(0)\n"
        "context.ask = ask\n"
        "quick.submit(['-q', '--', '/bin/true'])\n"
        "raise SystemExit('the quick path did not take the line')\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TPUQ_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=env, cwd=tmp_path, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
