"""What the reference promises scripts is what the code does: the exit status of each
failure kind, the job object's keys, the state and stop-request names; and every error
tpuq raises is a TpuqError with a kind."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

from tpuq.cli.errors import EXIT, translate
from tpuq.errors import Failure, TpuqError
from tpuq.jobjson import JobObject, ListedJob, ShownJob, keys_of
from tpuq.state.states import JobState, StopRequest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (ROOT / "docs" / "reference.md").read_text()


def section(title: str) -> str:
    start = REFERENCE.index(f"\n## {title}\n")
    end = REFERENCE.find("\n## ", start + 1)
    return REFERENCE[start:] if end < 0 else REFERENCE[start:end]


def tables(text: str) -> list[list[list[str]]]:
    """Each markdown table in `text`: its rows (the header and rule left out) of cells."""
    found: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if current is None:
                current = []  # the header
                found.append(current)
            elif not set("".join(cells)) <= set("-: "):
                current.append(cells)
        else:
            current = None
    return found


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_the_exit_status_table_is_the_clis():
    (rows, *_) = tables(section("Exit statuses"))
    documented = {Failure(kind): int(status) for status, kinds, _ in rows
                  for kind in ticked(kinds)}
    assert documented == EXIT
    assert set(EXIT) == set(Failure), "a failure kind with no exit status"


def test_every_kind_exits_with_its_status_through_the_one_error_path():
    for kind, status in EXIT.items():
        err = translate(TpuqError("x", kind))
        assert err is not None and err.exit_code == status, kind


def test_the_documented_job_keys_are_the_types():
    every, starts, show = tables(section("The JSON contract"))
    assert [r[0].strip("`") for r in every] == list(JobObject.__annotations__)
    assert {r[0].strip("`") for r in starts} == keys_of(ListedJob) - keys_of(JobObject)
    assert {r[0].strip("`") for r in show} == keys_of(ShownJob) - keys_of(JobObject)


def test_the_documented_stop_requests_and_states_are_the_enums():
    (every, *_) = tables(section("The JSON contract"))
    stop = next(r for r in every if r[0] == "`stop_request`")
    assert ticked(stop[2]) == [s.value for s in StopRequest]
    states = section("Job states").split("```")[0]
    assert [w for w in ticked(states) if w != "stop_request"] == [s.value for s in JobState]


def exception_classes() -> list[tuple[str, str, list[str]]]:
    """(module, class, base names) of every class in tpuq deriving from an exception."""
    found = []
    for path in (ROOT / "tpuq").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                found.append((str(path.relative_to(ROOT)), node.name, bases))
    return found


def test_every_tpuq_exception_derives_from_the_root():
    classes = exception_classes()
    errors = {"TpuqError"}
    changed = True
    while changed:  # classes deriving from errors, through any depth
        changed = False
        for _, name, bases in classes:
            if name not in errors and any(b.split(".")[-1] in errors for b in bases):
                errors.add(name)
                changed = True
    builtin = {n for n, v in vars(builtins).items()
               if isinstance(v, type) and issubclass(v, BaseException)}
    strays = [f"{mod}:{name}({', '.join(bases)})" for mod, name, bases in classes
              if name not in errors
              and any(b.split(".")[-1] in builtin or b.endswith("ClickException") for b in bases)]
    assert not strays, "not a TpuqError: " + "; ".join(strays)
