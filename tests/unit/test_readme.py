"""The README's configuration table and commands cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

from tpuq.settings import ENV

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_setting_is_in_the_readme_table():
    rows = dict(re.findall(r"^\| `(TPUQ_[A-Z_]+)` \| `([a-z_]+)` \|", README, re.M))
    assert rows == {var: name for name, var in ENV.items()}


def test_readme_test_command_is_what_ci_runs():
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert "make test" in README and "exec make test" in ci
