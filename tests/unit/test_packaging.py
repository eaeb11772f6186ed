"""What `pip install tpuq` gets: every package, and the migrations, run from the wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (.ci/check-python-min)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_of_the_tree_is_listed_for_the_build() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tpuq").rglob("__init__.py")}
    assert listed == found | {"tpuq.migrations"}


def test_the_wheel_carries_the_migrations_and_upgrades_a_database(tmp_path: Path) -> None:
    src = tmp_path / "src"  # a copy: setuptools writes build/ and egg-info into the tree
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "tpuq", "migrations"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                         if (ROOT / name).is_dir() else {}))
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = (tmp_path / "dist").glob("tpuq-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tpuq/migrations/env.py" in names and "tpuq/migrations/script.py.mako" in names
    assert any(n.startswith("tpuq/migrations/versions/0001_") for n in names)
    # `tpuq pod setup` ships the deployment kit's startup script (a link in the tree)
    packed = zipfile.ZipFile(wheel).read("tpuq/pod/startup-script.sh")
    assert packed == (ROOT / "workers" / "startup-script.sh").read_bytes()
    assert "tpuq/pod/services.sh" in names
    # `tpuq web`'s pages and the scripts it serves from the package, never from elsewhere
    assert {"tpuq/web/templates/base.html", "tpuq/web/static/chart.umd.min.js",
            "tpuq/web/static/htmx.min.js", "tpuq/web/static/app.js",
            "tpuq/web/static/VENDORED.md"} <= set(names)
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    db = tmp_path / "wheel.db"
    check = (
        "import tpuq, sys\n"
        "from tpuq.state.db import Database, SCHEMA_HEAD\n"
        "from tpuq.state.migrate import migrations_dir\n"
        f"assert tpuq.__file__.startswith({str(site)!r}), tpuq.__file__\n"
        f"assert str(migrations_dir()).startswith({str(site)!r}), migrations_dir()\n"
        f"d = Database('sqlite:///{db}')\n"
        "d.upgrade()\n"
        "assert d.schema_version() == SCHEMA_HEAD\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    run = subprocess.run([sys.executable, "-c", check], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
