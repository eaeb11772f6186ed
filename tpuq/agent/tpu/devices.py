"""TPU chips on this host: their device files and the host's TPU type.

Stdlib only: the agent imports this before anything heavy, and tests point it at fake
device files in a temp dir (`TPUQ_DEVICE_GLOB`) and a fake `/sys/bus/pci/devices`.
"""

from __future__ import annotations

import glob
import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

GOOGLE_PCI_VENDOR = "0x1ae0"

# PCI device id -> generation (jax `_src/hardware_utils.py`; Google's tpu-info
# `tpu_info/device.py`). 0x0027 is v2 or v3, told apart by subsystem_device (tpu-info).
_PCI_GENERATIONS: dict[str, str] = {
    "0x005e": "v4",
    "0x0062": "v5p",
    "0x0063": "v5litepod",
    "0x006f": "v6e",
    "0x0076": "tpu7x",
}
V2_V3_ID = "0x0027"
_V2_V3_SUBSYSTEMS = {"0x004e": "v2", "0x004f": "v3"}
# TPU ids jax knows that tpuq has no chip shapes for: a clear refusal, not a guess
_UNSUPPORTED: dict[str, str] = {"0x0056": "an unnamed TPU (jax: plc)", "0x0083": "TPU8i",
                                "0x007c": "TPU8t"}

# Google names v2, v3, v4, v5p (and, unverified, TPU7x) slices by TensorCore count (2 per
# chip: a 4-chip v4 host is "v4-8"), but v5e ("v5litepod-N") and v6e by chip count.
_CORES_PER_CHIP_IN_NAME: dict[str, int] = {
    "v2": 2,
    "v3": 2,
    "v4": 2,
    "v5p": 2,
    "v5litepod": 1,
    "v6e": 1,
    "tpu7x": 2,
}

# The TPU VM software version (OS image) each generation needs (Cloud TPU docs, "TPU
# software versions"): named when a host has the chips but not their device files.
IMAGES: dict[str, str] = {
    "v2": "tpu-ubuntu2204-base", "v3": "tpu-ubuntu2204-base", "v4": "tpu-ubuntu2204-base",
    "v5litepod": "v2-alpha-tpuv5-lite", "v5p": "v2-alpha-tpuv5", "v6e": "v2-alpha-tpuv6e",
    "tpu7x": "the image the TPU7x docs name for Compute Engine",
}

_TRAILING_INT = re.compile(r"(\d+)$")


@dataclass(frozen=True)
class Chip:
    index: int
    paths: tuple[str, ...]


def _split_globs(device_glob: str) -> list[str]:
    return [g for g in re.split(r"[,\s]+", device_glob) if g]


def discover_chips(device_glob: str) -> list[Chip]:
    """Chips found by the glob(s), one per trailing index, sorted by index."""
    by_index: dict[int, set[str]] = {}
    for pattern in _split_globs(device_glob):
        for path in glob.glob(pattern):
            name = os.path.basename(path)
            match = _TRAILING_INT.search(name)
            # `/dev/vfio/vfio` is the VFIO container, not a chip; `/dev/accel/` is the
            # kernel's DRM accel directory on new kernels, not a TPU device file.
            if match is None or os.path.isdir(path):
                continue
            by_index.setdefault(int(match.group(1)), set()).add(path)
    return [Chip(index=i, paths=tuple(sorted(p))) for i, p in sorted(by_index.items())]


def host_device_paths(chips: Iterable[Chip]) -> set[str]:
    """Resolved device paths, comparable with `/proc/*/fd/*` link targets."""
    return {os.path.realpath(p) for chip in chips for p in chip.paths}


def _read_id(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip().lower()
    except OSError:
        return None


@dataclass(frozen=True)
class PciTpu:
    """One Google PCI function that is (or may be) a TPU: its address, ids, the
    generation tpuq names it (None: unknown), and its IOMMU group (its /dev/vfio/N)."""

    address: str
    device_id: str
    generation: str | None
    iommu_group: int | None

    @property
    def base(self) -> str:
        """The PCI address without its function: the chip (tpu-info groups by it)."""
        return self.address.rsplit(".", 1)[0]


def _generation(device_id: str, subsystem: str | None) -> str | None:
    if device_id == V2_V3_ID:
        return _V2_V3_SUBSYSTEMS.get(subsystem or "")
    return _PCI_GENERATIONS.get(device_id)


def _iommu_group(base: str) -> int | None:
    try:
        return int(os.path.basename(os.readlink(os.path.join(base, "iommu_group"))))
    except (OSError, ValueError):
        return None


def pci_functions(sys_pci_dir: str) -> list[PciTpu]:
    """Every Google PCI function, sorted by address (gVNIC and the like included: their
    generation is None; `known` and `refusal` tell TPUs apart)."""
    try:
        entries = sorted(os.listdir(sys_pci_dir))
    except OSError:
        return []
    found = []
    for entry in entries:
        base = os.path.join(sys_pci_dir, entry)
        if _read_id(os.path.join(base, "vendor")) != GOOGLE_PCI_VENDOR:
            continue
        device = _read_id(os.path.join(base, "device")) or ""
        subsystem = _read_id(os.path.join(base, "subsystem_device"))
        found.append(PciTpu(entry, device, _generation(device, subsystem), _iommu_group(base)))
    return found


def refusal(functions: list[PciTpu], vfio_groups: Iterable[int]) -> str | None:
    """Why tpuq cannot name this host's chips, or None: a TPU id it has no shapes for, a
    v2/v3 whose subsystem says neither, or a Google device behind one of the host's
    /dev/vfio nodes whose id tpuq does not know."""
    groups = set(vfio_groups)
    for f in functions:
        what = None
        if f.device_id in _UNSUPPORTED:
            what = f"{_UNSUPPORTED[f.device_id]} (PCI id {f.device_id})"
        elif f.device_id == V2_V3_ID and f.generation is None:
            what = f"a v2 or v3 chip whose PCI subsystem_device says neither ({f.address})"
        elif f.generation is None and f.iommu_group in groups:
            what = f"a Google device with PCI id {f.device_id} behind /dev/vfio/{f.iommu_group}"
        if what:
            return (f"this host's TPU chips are not known to tpuq: {what}; set TPUQ_TPU_TYPE "
                    "to its type (e.g. v4-8) only if you know its chip shapes (docs/tpu-vm.md)")
    return None


def tpu_type_name(generation: str, chip_count: int) -> str:
    return f"{generation}-{chip_count * _CORES_PER_CHIP_IN_NAME.get(generation, 1)}"


def generation_of(tpu_type: str | None) -> str | None:
    """The generation a type names ("v5litepod-8" -> "v5litepod"), None when unknown."""
    head = (tpu_type or "").rpartition("-")[0]
    return head if head in _CORES_PER_CHIP_IN_NAME else None


def detect_tpu_type(chip_count: int, sys_pci_dir: str,
                    configured: str | None = None) -> str | None:
    """The host's TPU type in Google's naming ("v4-8", "v5litepod-8"), or None.

    `chip_count` comes from the device files; when it is 0 the number of TPU chips on
    the PCI bus is used instead (a host whose device files are hidden still has a type).
    """
    if configured:
        return configured
    known = [f for f in pci_functions(sys_pci_dir) if f.generation is not None]
    if not known:
        return None
    generation, _ = Counter(f.generation for f in known).most_common(1)[0]
    assert generation is not None
    chips = len({f.base for f in known if f.generation == generation})
    return tpu_type_name(generation, chip_count if chip_count > 0 else chips)


def group_by_pci(chips: list[Chip], functions: list[PciTpu]) -> list[Chip]:
    """Chips whose PCI device has several TPU functions (TPU7x: two TensorCores, each its
    own /dev/vfio group) made one chip each, as tpu-info groups them by PCI address;
    numbered in the order of their lowest group. Unchanged when no chip has two."""
    base_of = {f.iommu_group: f.base for f in functions
               if f.generation is not None and f.iommu_group is not None}
    per_base = Counter(base_of.values())
    if not any(n > 1 for n in per_base.values()):
        return chips
    grouped: dict[str, list[Chip]] = {}
    alone: list[Chip] = []
    for chip in chips:
        base = base_of.get(chip.index)
        if base is None:
            alone.append(chip)
        else:
            grouped.setdefault(base, []).append(chip)
    merged = sorted(grouped.values(), key=lambda cs: min(c.index for c in cs)) + \
        [[c] for c in alone]
    return [Chip(i, tuple(sorted(p for c in cs for p in c.paths))) for i, cs in enumerate(merged)]
