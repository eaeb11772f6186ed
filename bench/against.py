"""`bench/run.py --against REV`: every figure of this tree and of REV, interleaved.

REV is checked out once into a git worktree with a venv of its own, kept for the next
run: `$XDG_CACHE_HOME/tpuq-bench/<commit>/` (default `~/.cache`), with `tree/` and
`venv/` (tpuq installed there as `make install` does here: editable, the tree on the
path as a plain .pth line, so both sides start as a user's `pip install .` does). Then
each section of bench/run.py runs as a child process once with this tree's venv and once
with REV's, the order swapped every section (ABBA), so both sides see the same machine at
nearly the same moment. Both sides run
*this* tree's bench code; only the tpuq under test (CLI, agent, library) differs. The
children import `bench` and `tests` from a directory of links to them (BENCH_IMPORT_ROOT),
never from this tree's root, where `import tpuq` would find this tree's package.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
THIS = "this tree"
# how `make install` installs (Makefile): the tree on the venv's path as a plain .pth line,
# not setuptools' default editable finder, which every Python process of the venv would
# import (about 15 ms, the baseline's `python -c pass` included)
EDITABLE = ("--config-settings", "editable_mode=compat")


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base, "tpuq-bench")


def prepare(rev: str, log: Callable[[str], None]) -> Path:
    """The python of REV's cached venv, made (worktree, venv, install) if not there yet."""
    commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    home = cache_dir() / commit[:12]
    python = home / "venv" / "bin" / "python"
    done = home / "ready"
    marker = " ".join((commit, *EDITABLE))
    if done.exists() and python.exists() and done.read_text().strip() == marker:
        return python
    log(f"preparing {rev} ({commit[:12]}) in {home} (once; kept for later runs) ...")
    home.mkdir(parents=True, exist_ok=True)
    tree = home / "tree"
    if not (tree / ".git").exists():
        _git("worktree", "prune")
        _git("worktree", "add", "--detach", "--force", str(tree), commit)
    subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(tree),
                          *EDITABLE], capture_output=True, text=True, check=False)
    if pip.returncode != 0:
        raise RuntimeError(f"pip install -e {tree} failed:\n{pip.stderr[-3000:]}")
    subprocess.run([str(python), "-m", "compileall", "-q", str(tree / "tpuq")], check=True)
    done.write_text(marker + "\n")
    return python


def _import_root(tmp: str) -> str:
    """A directory holding links to this tree's `bench` and `tests`, and nothing else."""
    root = Path(tmp, "imports")
    root.mkdir()
    for name in ("bench", "tests"):
        (root / name).symlink_to(ROOT / name)
    return str(root)


def _child(python: Path, section: str, quick: bool, imports: str, cwd: str,
           log: Callable[[str], None]) -> tuple[dict[str, float], list[str]]:
    argv = [str(python), str(ROOT / "bench" / "run.py"), "--json", "--only", section]
    env = {**os.environ, "BENCH_IMPORT_ROOT": imports}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([*argv, *(["--quick"] if quick else [])], env=env, cwd=cwd,
                          capture_output=True, text=True, check=False)
    try:
        data = json.loads(done.stdout)
    except ValueError:
        log(done.stderr[-2000:])
        return {}, [f"{section}: the child printed no figures (exit {done.returncode})"]
    return data["figures"], data["errors"]


def compare(rev: str, sections: list[str], quick: bool, log: Callable[[str], None],
            repeat: int = 1) -> dict[str, Any]:
    """{side: {"figures": ..., "errors": [...]}} for this tree and REV; with `repeat`,
    each section runs that many times per side, alternated, and each figure is the
    median of its runs."""
    pythons = {THIS: Path(sys.executable), rev: prepare(rev, log)}
    # both sides from bytecode (PYTHONDONTWRITEBYTECODE would leave this tree's new
    # modules compiling on every run)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "tpuq")], check=True)
    out: dict[str, dict[str, Any]] = {k: {"figures": {}, "errors": []} for k in pythons}
    with tempfile.TemporaryDirectory(prefix="tpuq-against-") as tmp:
        imports = _import_root(tmp)
        runs: dict[str, list[dict[str, float]]] = {k: [] for k in pythons}
        n = 0
        for section in sections:
            for _ in range(repeat):
                order = list(pythons) if n % 2 == 0 else list(reversed(pythons))
                n += 1
                for side in order:
                    log(f"{section}: {side} ...")
                    figures, errors = _child(pythons[side], section, quick, imports, tmp, log)
                    runs[side].append(figures)
                    out[side]["errors"] += [f"{side}: {e}" for e in errors]
    for side, got in runs.items():
        keys = {k for f in got for k in f}
        out[side]["figures"] = {k: statistics.median(f[k] for f in got if k in f)
                                for k in keys}
    return out


def print_comparison(rev: str, table: dict[str, Any], errors: list[str]) -> None:
    """Each row: this tree, REV, their ratio, and each side's ratio to its own baseline."""
    old = {r["key"]: r for r in table[rev]}
    head = (f"{'figure':24s}{'this tree':>11s}{rev[:11]:>12s}{'this/rev':>10s}"
            f"{'ratio to baseline (this, rev)':>32s}")
    print(head)
    print("-" * len(head))
    for row in table[THIS]:
        before = old.get(row["key"])
        if before is None:
            continue
        value, was = row["value"], before["value"]
        ratio = value / was if was else None
        base = f"{_x(row['ratio'])}, {_x(before['ratio'])}"
        better = "higher is better" if row["more_is_better"] else ""
        print(f"{row['figure']:24s}{_fmt(value, row['unit']):>11s}"
              f"{_fmt(was, row['unit']):>12s}{_x(ratio):>10s}{base:>32s}  {better}")
    for key, label in EXTRA:
        this, was = table[THIS + " figures"].get(key), table[rev + " figures"].get(key)
        if this is not None and was is not None:
            print(f"{label:24s}{_fmt(this, 'ms'):>11s}{_fmt(was, 'ms'):>12s}"
                  f"{_x(this / was if was else None):>10s}")
    for e in errors:
        print(f"ERROR {e}")


# figures without a row of their own, worth seeing side by side
EXTRA = (("turnover_agent_cpu_ms_per_job", "turnover: agent CPU/job"),
         ("deep_turnover_agent_cpu_ms_per_job", "deep queue: agent CPU/job"),
         ("team_turnover_agent_cpu_ms_per_job", "team: agent CPU/job"),
         ("python_pass_p50_ms", "python -c pass p50"),
         ("socket_submit_ms_per_job", "socket submit/job"),
         ("turnover_file_create_ms", "file create in home"),
         ("team_turnover_file_create_ms", "team: file create"))


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _fmt(v: float, unit: str) -> str:
    if unit == "ms":
        return f"{v:.1f} ms"
    if unit == "tasks/s":
        return f"{v:,.0f}/s"
    return f"{v:g} {unit}"
