"""TPU type names as users type them, and what a wrong host says at agent start."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpuq.agent.errors import EXIT_UNFIT
from tpuq.agent.main import warn_without_hugepages
from tpuq.shapes import canonical, host_chips, slice_hosts, type_error
from tpuq.spec import JobSpec


@pytest.mark.parametrize("typed, name", [("v5e-8", "v5litepod-8"), ("v5lite-4", "v5litepod-4"),
                                         ("v5e-16", "v5litepod-16"), ("v6e-8", "v6e-8")])
def test_the_names_tpu_info_jax_ci_and_gke_use_are_aliases(typed: str, name: str) -> None:
    assert canonical(typed) == name and type_error(typed) is None
    spec = JobSpec(command=["/bin/true"], cwd="/", owner="u", team="t", tpu_type=typed)
    assert spec.validate().tpu_type == name, "stored under Google's Cloud TPU name"


def test_tpu7x_is_a_type_of_two_tensorcores_per_chip() -> None:
    assert type_error("tpu7x-8") is None
    assert host_chips("tpu7x-8") == 4 and slice_hosts("tpu7x-8") == 1
    assert slice_hosts("tpu7x-32") == 4


@pytest.mark.parametrize("typed, said", [
    ("v5e-3", "v5litepod types are v5litepod-1, v5litepod-4, v5litepod-8"),
    ("v4-4", "v4 types are v4-8"),
    ("v5litpod-8", "did you mean v5litepod-8?"),
    ("v4-7", "did you mean v4-8?"),
])
def test_a_wrong_size_is_answered_within_its_own_family(typed: str, said: str) -> None:
    error = type_error(typed)
    assert error is not None and said in error
    assert "v6e" not in error, "no suggestion from another family"


def test_the_agent_warns_when_transparent_hugepages_are_not_always(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    knob = tmp_path / "enabled"
    knob.write_text("always madvise [never]\n")
    with caplog.at_level(logging.WARNING, logger="tpuq.agent"):
        assert warn_without_hugepages(str(knob))
    assert "transparent hugepages" in caplog.text and "echo always" in caplog.text
    knob.write_text("[always] madvise never\n")
    assert not warn_without_hugepages(str(knob))
    assert not warn_without_hugepages(str(tmp_path / "missing"))


def test_tpu_chips_without_device_files_name_the_image_fix_and_stop_the_restarts(
        tmp_path: Path) -> None:
    """A VM made with the wrong image: the PCI bus has v5e chips, /dev has no vfio nodes.
    The agent says which image, and exits 78, which its unit does not restart."""
    pci = tmp_path / "pci"
    for i in range(4):
        d = pci / f"0000:00:0{4 + i}.0"
        d.mkdir(parents=True)
        (d / "vendor").write_text("0x1ae0\n")
        (d / "device").write_text("0x0063\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUQ_")}
    env.update(TPUQ_HOME=str(tmp_path / "home"), TPUQ_PCI_DIR=str(pci), TPUQ_HOST="h",
               TPUQ_DEVICE_GLOB=str(tmp_path / "dev" / "vfio" / "[0-9]*"))
    r = subprocess.run([sys.executable, "-c", "from tpuq.cli.main import main; main()", "agent"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == EXIT_UNFIT, r.stderr
    assert "v2-alpha-tpuv5-lite" in r.stderr and "no TPU device files" in r.stderr
    assert "Traceback" not in r.stderr
