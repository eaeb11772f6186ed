"""Tables the CLI prints: one line per row, whatever the cells hold."""

from __future__ import annotations

from tpuq.cli.render import table


def test_a_multi_line_command_stays_on_its_row():
    out = table(["ID", "DETAIL"], [[1, "python -c '\nimport os\n\tprint(1)'"], [2, "true"]])
    assert out.splitlines() == ["ID  DETAIL", "1   python -c ' import os print(1)'", "2   true"]


def test_a_long_last_cell_is_cut_with_an_ellipsis():
    out = table(["ID", "DETAIL"], [[1, "x" * 100]], max_last=10)
    assert out.splitlines()[1] == "1   " + "x" * 9 + "…"
