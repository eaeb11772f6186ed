"""The scheduling-pass figures from bench/bench_policy.py, when that file exists."""

from __future__ import annotations

import importlib.util
from pathlib import Path

PATH = Path(__file__).with_name("bench_policy.py")


def available() -> bool:
    return PATH.is_file()


def run() -> dict[str, float]:
    """bench_policy.run()'s figures, prefixed `policy_`; {} when the module is absent."""
    if not available():
        return {}
    spec = importlib.util.spec_from_file_location("bench_policy", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {f"policy_{k}": float(v) for k, v in module.run().items()}
