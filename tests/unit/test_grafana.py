"""The Grafana dashboard in workers/ charts series /metrics really serves: every panel's
query names only metrics of the pinned set (with their histogram, summary and counter
suffixes) and only labels those metrics carry."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.web.metrics_golden import GOLDEN

DASHBOARD = Path(__file__).resolve().parents[2] / "workers" / "grafana-dashboard.json"
SUFFIXES = {"histogram": ("_bucket", "_count", "_sum"), "summary": ("_count", "_sum"),
            "counter": ("_total",), "gauge": ("",)}
FUNCTIONS_AND_KEYWORDS = {"sum", "by", "rate", "increase", "histogram_quantile", "on",
                          "group_left", "le"}


def series() -> dict[str, set[str]]:
    """Every series name /metrics serves -> the labels it may carry."""
    out = {}
    for name, (kind, labels) in GOLDEN.items():
        extra = {"le"} if kind == "histogram" else set()
        for suffix in SUFFIXES[kind]:
            out[name + suffix] = set(labels) | (extra if suffix == "_bucket" else set())
    return out


def queries() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p["targets"]]


def test_the_dashboard_has_panels_with_queries() -> None:
    assert len(queries()) >= 15


def test_every_query_names_a_real_series_and_its_labels() -> None:
    known = series()
    for title, expr in queries():
        names = set(re.findall(r"\btpuq_[a-z_]+", expr))
        assert names, f"{title}: no tpuq series in {expr!r}"
        for name in names:
            assert name in known, f"{title}: {name} is not served by /metrics"
        for name, matchers in re.findall(r"(tpuq_[a-z_]+)\{([^}]*)\}", expr):
            for label in re.findall(r"(\w+)\s*=", matchers):
                assert label in known[name], f"{title}: {name} has no label {label}"
        allowed = set().union(*(known[n] for n in names))
        for group in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
            for label in (g.strip() for g in group.split(",")):
                assert label in allowed, f"{title}: no series of {names} has label {label}"


def test_a_wrong_name_would_be_caught() -> None:
    assert "tpuq_jobs_pending" not in series() and "tpuq_preemptions" not in series()
