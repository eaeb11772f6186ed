from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tpuq.agent.tpu.devices import (
    Chip,
    detect_tpu_type,
    discover_chips,
    group_by_pci,
    host_device_paths,
    pci_functions,
    refusal,
)


def _touch(*paths: Path) -> None:
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.touch()


def test_discover_accel_chips_sorted_by_numeric_index(tmp_path: Path) -> None:
    _touch(*(tmp_path / f"accel{i}" for i in (10, 2, 0, 1)))
    chips = discover_chips(str(tmp_path / "accel*"))
    assert [c.index for c in chips] == [0, 1, 2, 10]
    assert chips[3] == Chip(index=10, paths=(str(tmp_path / "accel10"),))


def test_discover_vfio_ignores_container_and_names_without_index(
    tmp_path: Path,
) -> None:
    vfio = tmp_path / "vfio"
    _touch(vfio / "0", vfio / "1", vfio / "vfio", vfio / "devices")
    chips = discover_chips(str(vfio / "*"))
    assert [(c.index, c.paths) for c in chips] == [
        (0, (str(vfio / "0"),)),
        (1, (str(vfio / "1"),)),
    ]


def test_discover_several_globs_separated_by_comma_and_space(tmp_path: Path) -> None:
    _touch(tmp_path / "accel0", tmp_path / "vfio" / "1", tmp_path / "vfio" / "vfio")
    globs = f"{tmp_path}/accel*, {tmp_path}/vfio/[0-9]*  {tmp_path}/nothing*"
    chips = discover_chips(globs)
    assert [c.index for c in chips] == [0, 1]


def test_discover_merges_files_with_same_index(tmp_path: Path) -> None:
    _touch(tmp_path / "accel0", tmp_path / "vfio" / "0")
    chips = discover_chips(f"{tmp_path}/accel*,{tmp_path}/vfio/*")
    assert chips == [Chip(0, (str(tmp_path / "accel0"), str(tmp_path / "vfio" / "0")))]


def test_discover_skips_directories(tmp_path: Path) -> None:
    (tmp_path / "accel").mkdir()
    (tmp_path / "accel7").mkdir()
    assert discover_chips(str(tmp_path / "accel*")) == []


def test_discover_nothing_found(tmp_path: Path) -> None:
    assert discover_chips(str(tmp_path / "accel*")) == []


def test_host_device_paths_are_resolved(tmp_path: Path) -> None:
    real = tmp_path / "real"
    _touch(real / "accel0", real / "accel1")
    (tmp_path / "link").symlink_to(real)
    chips = discover_chips(str(tmp_path / "link" / "accel*"))
    assert host_device_paths(chips) == {
        os.path.realpath(real / "accel0"),
        os.path.realpath(real / "accel1"),
    }


def _fake_pci(root: Path, devices: dict[str, tuple[Any, ...]]) -> str:
    """/sys/bus/pci/devices as the kernel lays it out: vendor, device, subsystem_device,
    and the iommu_group link (to /sys/kernel/iommu_groups/N) of each function."""
    for slot, (vendor, device, *more) in devices.items():
        d = root / slot
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "device").write_text(device + "\n")
        if more and more[0]:
            (d / "subsystem_device").write_text(more[0] + "\n")
        if len(more) > 1:
            (d / "iommu_group").symlink_to(f"../../../kernel/iommu_groups/{more[1]}")
    return str(root)


def _tpu_pci(tmp_path: Path, device_id: str, n: int) -> str:
    devices = {f"0000:00:0{i}.0": ("0x1ae0", device_id) for i in range(n)}
    devices["0000:00:1f.0"] = ("0x8086", "0x7000")  # a non-TPU device must be ignored
    return _fake_pci(tmp_path / "pci", devices)


def test_detect_v4_names_tensorcores(tmp_path: Path) -> None:
    assert detect_tpu_type(4, _tpu_pci(tmp_path, "0x005e", 4)) == "v4-8"


def test_detect_v2_and_v3_are_told_apart_by_subsystem_device(tmp_path: Path) -> None:
    """They share a PCI device id; tpu-info reads subsystem_device (0x004e v2, 0x004f v3),
    and a v2 must not register as a v3 (half the memory)."""
    for sub, name in (("0x004e", "v2-8"), ("0x004f", "v3-8")):
        pci = _fake_pci(tmp_path / sub, {f"0000:00:0{i}.0": ("0x1ae0", "0x0027", sub)
                                         for i in range(4)})
        assert detect_tpu_type(4, pci) == name
        assert refusal(pci_functions(pci), []) is None
    neither = _fake_pci(tmp_path / "x", {"0000:00:04.0": ("0x1ae0", "0x0027", "0x0001")})
    assert "v2 or v3" in (refusal(pci_functions(neither), []) or "")


def test_tpu7x_names_cores_and_groups_its_two_vfio_nodes_per_chip_by_pci_address(
        tmp_path: Path) -> None:
    """TPU7x: two TensorCores per chip, each a PCI function with its own IOMMU group
    (/dev/vfio/N); tpu-info groups them by PCI address (domain:bus:device)."""
    devices = {}
    for chip in range(4):
        for core in range(2):
            devices[f"0000:00:{4 + chip:02x}.{core}"] = ("0x1ae0", "0x0076", "", 2 * chip + core)
    pci = _fake_pci(tmp_path / "pci", devices)
    vfio = tmp_path / "vfio"
    vfio.mkdir()
    for g in range(8):
        (vfio / str(g)).touch()
    (vfio / "vfio").touch()
    chips = group_by_pci(discover_chips(f"{vfio}/[0-9]*"), pci_functions(pci))
    assert [c.index for c in chips] == [0, 1, 2, 3]
    assert chips[1].paths == (str(vfio / "2"), str(vfio / "3"))
    assert detect_tpu_type(len(chips), pci) == "tpu7x-8"
    one_each = _fake_pci(tmp_path / "v6e", {f"0000:00:0{i}.0": ("0x1ae0", "0x006f", "", i)
                                            for i in range(4)})
    flat = discover_chips(f"{vfio}/[0-3]")
    assert group_by_pci(flat, pci_functions(one_each)) == flat, "one function per chip"


def test_chips_tpuq_does_not_know_are_refused_in_one_line(tmp_path: Path) -> None:
    newer = _fake_pci(tmp_path / "a", {"0000:00:04.0": ("0x1ae0", "0x007c")})
    said = refusal(pci_functions(newer), [])
    assert said is not None and "TPU8t" in said and "TPUQ_TPU_TYPE" in said
    gvnic = {"0000:00:03.0": ("0x1ae0", "0x0042", "", 3)}  # every GCE VM's NIC: not a chip
    assert refusal(pci_functions(_fake_pci(tmp_path / "b", gvnic)), [0, 1]) is None
    behind = _fake_pci(tmp_path / "c", {"0000:00:05.0": ("0x1ae0", "0x0099", "", 0)})
    said = refusal(pci_functions(behind), [0])
    assert said is not None and "0x0099 behind /dev/vfio/0" in said


def test_detect_v5p_names_tensorcores(tmp_path: Path) -> None:
    assert detect_tpu_type(4, _tpu_pci(tmp_path, "0x0062", 4)) == "v5p-8"


def test_detect_v5e_and_v6e_name_chips(tmp_path: Path) -> None:
    assert detect_tpu_type(8, _tpu_pci(tmp_path / "a", "0x0063", 8)) == "v5litepod-8"
    assert detect_tpu_type(4, _tpu_pci(tmp_path / "b", "0x006f", 4)) == "v6e-4"


def test_detect_falls_back_to_pci_count_without_device_files(tmp_path: Path) -> None:
    assert detect_tpu_type(0, _tpu_pci(tmp_path, "0x0063", 4)) == "v5litepod-4"


def test_detect_configured_wins_over_pci(tmp_path: Path) -> None:
    pci = _tpu_pci(tmp_path, "0x0027", 4)
    assert detect_tpu_type(4, pci, configured="v2-8") == "v2-8"


def test_detect_none_without_tpu(tmp_path: Path) -> None:
    pci = _fake_pci(tmp_path / "pci", {"0000:00:1f.0": ("0x8086", "0x7000")})
    assert detect_tpu_type(4, pci) is None
    assert detect_tpu_type(4, str(tmp_path / "missing")) is None


def test_detect_unknown_google_device_is_none(tmp_path: Path) -> None:
    assert detect_tpu_type(4, _tpu_pci(tmp_path, "0x9999", 4)) is None
