"""The package's layers point one way and no module imports itself back.

cli -> pod -> client -> agent -> web -> api -> queue -> scheduler -> fleet -> state -> leaf modules
(LAYERS). Inside the agent, its TPU and GCE groups stand below the rest (AGENT_BASE).
Every import counts,
also those under TYPE_CHECKING and those inside functions (lazy imports keep the CLI
fast; they still tie modules together).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tpuq"
MIGRATIONS = ROOT / "migrations"  # installed as tpuq.migrations

# lowest first; a module may import its own layer and those below it
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("leaf", ("tpuq", "tpuq.settings", "tpuq.spec", "tpuq.shapes", "tpuq.jobenv", "tpuq.envinputs",
              "tpuq.users", "tpuq.protocol", "tpuq.framing", "tpuq.job", "tpuq.localclient",
              "tpuq.runfn", "tpuq.checkpoints", "tpuq.terminal")),
    ("state", ("tpuq.state", "tpuq.migrations")),
    # the fleet controller: over the state layer (its rows, the lost-host requeue); the
    # api reads its view for `tpuq status`, the CLI runs it
    ("fleet", ("tpuq.fleet",)),
    ("scheduler", ("tpuq.scheduler",)),
    ("queue", ("tpuq.queue",)),
    ("api", ("tpuq.api",)),
    # the dashboard and /metrics: renders what the handlers answer; only the CLI imports it
    ("web", ("tpuq.web",)),
    ("agent", ("tpuq.agent",)),
    ("client", ("tpuq.client",)),
    ("pod", ("tpuq.pod",)),
    ("cli", ("tpuq.cli",)),
]


def module_name(path: Path) -> str:
    if path.is_relative_to(MIGRATIONS):
        parts = ("tpuq", "migrations", *path.relative_to(MIGRATIONS).with_suffix("").parts)
    else:
        parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for d in (PACKAGE, MIGRATIONS) for p in d.rglob("*.py")}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """tpuq modules `path` imports (a `from pkg import name` of a module counts as it)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tpuq"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tpuq"):
            base = node.module or ""
            subs = {f"{base}.{a.name}" for a in node.names} & known
            found.update(subs or {base})
    return found & known


def layer(module: str) -> int:
    best = (-1, -1)  # (length of the matching prefix, layer index)
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best[0]:
                best = (len(p), i)
    assert best[1] >= 0, f"{module} is in no layer: add it to LAYERS"
    return best[1]


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {m: imports_of(p, known) - {m} for m, p in mods.items()}


def test_every_import_points_down_or_sideways() -> None:
    wrong = [f"{m} ({LAYERS[layer(m)][0]}) imports {dep} ({LAYERS[layer(dep)][0]})"
             for m, deps in graph().items() for dep in deps
             if layer(dep) > layer(m) and not dep == "tpuq"]
    assert not wrong, "\n".join(sorted(wrong))


# Inside the agent: what the host's TPU is and who holds it, and what GCE says of the host,
# stand on their own. They import, of the agent, only each other and its shared error and
# exit vocabulary; never the attempt machinery, the keeper, the socket or the daemon.
AGENT_BASE = ("tpuq.agent.tpu", "tpuq.agent.gce")
AGENT_SHARED = ("tpuq.agent", "tpuq.agent.errors", "tpuq.agent.exits")


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def agent_base_breaches(g: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} imports {dep}" for m, deps in g.items() if _within(m, AGENT_BASE)
                  for dep in deps if _within(dep, ("tpuq.agent",))
                  and not _within(dep, AGENT_BASE) and dep not in AGENT_SHARED)


def test_the_agents_tpu_and_gce_groups_import_no_attempt_keeper_or_socket_module() -> None:
    breaches = agent_base_breaches(graph())
    assert not breaches, "\n".join(breaches)


def test_the_agent_group_rule_catches_a_breach() -> None:
    g = {"tpuq.agent.tpu.holders": {"tpuq.agent.attempts.outcome", "tpuq.agent.errors"},
         "tpuq.agent.gce.notices": {"tpuq.agent.local.server", "tpuq.agent.gce.metadata"},
         "tpuq.agent.gce.topology": {"tpuq.agent.main", "tpuq.agent.tpu.devices"},
         "tpuq.agent.attempts.gang": {"tpuq.agent.keeper.link"}}
    assert agent_base_breaches(g) == [
        "tpuq.agent.gce.notices imports tpuq.agent.local.server",
        "tpuq.agent.gce.topology imports tpuq.agent.main",
        "tpuq.agent.tpu.holders imports tpuq.agent.attempts.outcome"]


def test_no_import_cycles() -> None:
    g = graph()
    # packages' __init__ modules import nothing of their own; a parent package is on
    # every path anyway, so it is no edge
    g = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in g.items()}
    cycles = []
    for start in g:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for dep in g.get(node, ()):
                if dep == start:
                    cycles.append(" -> ".join([*path, dep]))
                elif dep not in seen:
                    seen.add(dep)
                    stack.append((dep, [*path, dep]))
    assert not cycles, "\n".join(sorted(set(cycles))[:20])


def test_the_checker_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                   "    from tpuq.state import jobs\n"
                   "def f():\n    import tpuq.cli.main\n")
    assert imports_of(src, {"tpuq.state.jobs", "tpuq.cli.main", "tpuq.state"}) == {
        "tpuq.state.jobs", "tpuq.cli.main"}


def test_every_package_docstring_maps_its_modules() -> None:
    """Each package's __init__ names every module in it (a map that stays true)."""
    missing = []
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        for mod in init.parent.glob("*.py"):
            if mod.name != "__init__.py" and f"`{mod.name}`" not in doc:
                missing.append(f"{init.parent.name}/{mod.name}")
    assert not missing, f"not in their package's docstring: {missing}"


# The vocabulary every layer speaks (the CLI and the socket client included): job states,
# stop requests, failure kinds, the job object. Stdlib only, so speaking it costs nothing.
VOCABULARY = ("tpuq.state.states", "tpuq.errors", "tpuq.jobjson")


def test_the_vocabulary_imports_only_the_standard_library() -> None:
    import sys

    mods = modules()
    heavy = []
    for name in (*VOCABULARY, "tpuq.state"):  # importing tpuq.state.states runs tpuq.state
        for node in ast.walk(ast.parse(mods[name].read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            heavy += [f"{name} imports {n}" for n in names
                      if n.split(".")[0] not in sys.stdlib_module_names]
    assert not heavy, "\n".join(heavy)


def test_importing_the_vocabulary_loads_no_third_party_module() -> None:
    import subprocess
    import sys

    code = (f"import sys; import {', '.join(VOCABULARY)}; "
            "print(' '.join(m for m in sys.modules if m.split('.')[0] not in "
            "sys.stdlib_module_names and m.split('.')[0] not in ('tpuq', '__main__')))")
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout.split()
    assert out == []
