"""Shared fixtures: a fresh stack (state dir, settings) and fake TPU hosts per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import FakeHost, Stack


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(home=tmp_path / "home")
    try:
        yield s
    finally:
        s.cleanup()


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "host-a", name="tpu-a", chips=4)
