"""What an admin declares: slots of TPU VMs, read from a TOML file and checked here.

One `[[slot]]` table per slot; `count` VMs of it are kept. Names become part of node ids,
host names and labels, so they are held to what all three accept. Import-light: no
SQLAlchemy, no Google client.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tpuq.settings import toml_reader
from tpuq.shapes import host_chips, slice_hosts, type_error
from tpuq.spec import SpecError, parse_duration

CAPACITY = ("on-demand", "spot", "reserved")
# node ids: lowercase letters, digits, hyphens, a letter first, at most 63 (as GCE
# instance names, RFC 1035); a slot name leaves room for the prefix, index and generation
NAME = re.compile(r"[a-z]([-a-z0-9]{0,22}[a-z0-9])?")
PREFIX = re.compile(r"[a-z]([-a-z0-9]{0,10}[a-z0-9])?")
# label keys and values (cloud.google.com/compute/docs/labeling-resources#requirements)
LABEL_KEY = re.compile(r"[a-z][-_a-z0-9]{0,62}")
LABEL_VALUE = re.compile(r"[-_a-z0-9]{0,63}")
MAX_COUNT = 64
RESERVED_LABELS = ("tpuq-fleet", "tpuq-slot", "tpuq-index", "tpuq-generation")
FIELDS = {"name", "accelerator_type", "runtime_version", "project", "zone", "capacity",
          "queued", "valid_for", "count", "network", "subnetwork", "labels", "reservation"}


@dataclass(frozen=True)
class SlotSpec:
    """One declared slot: `count` TPU VMs alike."""

    name: str
    accelerator_type: str
    runtime_version: str
    project: str
    zone: str
    capacity: str = "on-demand"  # on-demand | spot | reserved
    # asked for through a queued resource (waits in Google's queue), for at most
    # `valid_for_s` seconds when given
    queued: bool = False
    valid_for_s: float | None = None
    count: int = 1
    network: str = ""
    subnetwork: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    reservation: str = ""  # a queued resource's reservation (projects/../reservations/..)

    @property
    def hosts(self) -> int:
        """Workers (agents) of one VM of this slot: 1, or more for a multi-host slice."""
        return slice_hosts(self.accelerator_type)

    @property
    def chips(self) -> int:
        """Chips of one VM of this slot (all its workers)."""
        return (host_chips(self.accelerator_type) or 0) * self.hosts

    def describe(self) -> str:
        """"v4-8 spot" or "v4-32 on-demand, queued": how status names the slot's kind."""
        return f"{self.accelerator_type} {self.capacity}" + (", queued" if self.queued else "")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["labels"] = dict(self.labels)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SlotSpec:
        """A spec as `to_json` stored it; TypeError/ValueError for anything else."""
        if not isinstance(d, Mapping):
            raise TypeError(f"a JSON object, not {type(d).__name__}")
        spec = cls(**{**d, "labels": dict(d.get("labels") or {})})
        for name, kind in (("name", str), ("accelerator_type", str), ("zone", str),
                           ("project", str), ("runtime_version", str), ("count", int)):
            if not isinstance(getattr(spec, name), kind):
                raise TypeError(f"{name}: not a {kind.__name__}")
        return spec


@dataclass(frozen=True)
class FleetFile:
    prefix: str
    slots: tuple[SlotSpec, ...]


def load(path: str) -> FleetFile:
    """Read and check a fleet file; SpecError names the file and what is wrong."""
    tomllib = toml_reader()
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise SpecError(f"cannot read {path}: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: not TOML: {e}") from None
    try:
        return parse(data)
    except SpecError as e:
        raise SpecError(f"{path}: {e}") from None


def parse(data: Mapping[str, Any]) -> FleetFile:
    unknown = set(data) - {"prefix", "slot"}
    if unknown:
        raise SpecError(f"unknown key {sorted(unknown)[0]!r} (a fleet file has `prefix` "
                        "and [[slot]] tables)")
    prefix = _text(data, "prefix", "tpuq")
    if not PREFIX.fullmatch(prefix):
        raise SpecError(f"prefix {prefix!r}: 1-12 lowercase letters, digits or hyphens, "
                        "a letter first")
    raw = data.get("slot", [])
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise SpecError("slots are [[slot]] tables")
    slots = tuple(_slot(t) for t in raw)
    names = [s.name for s in slots]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise SpecError(f"slot {dup!r} is declared twice")
    return FleetFile(prefix, slots)


def _slot(t: Mapping[str, Any]) -> SlotSpec:
    name = _text(t, "name", "")
    where = f"slot {name!r}" if name else "a slot"
    try:
        return _checked(t, name)
    except SpecError as e:
        raise SpecError(f"{where}: {e}") from None


def _checked(t: Mapping[str, Any], name: str) -> SlotSpec:
    unknown = set(t) - FIELDS
    if unknown:
        raise SpecError(f"unknown key {sorted(unknown)[0]!r} (keys: {', '.join(sorted(FIELDS))})")
    if not NAME.fullmatch(name):
        raise SpecError("name: 1-24 lowercase letters, digits or hyphens, a letter first")
    accel = _text(t, "accelerator_type", "")
    problem = type_error(accel) if accel else "accelerator_type is required (e.g. v4-8)"
    if problem:
        raise SpecError(problem)
    for key in ("runtime_version", "project", "zone"):
        if not _text(t, key, ""):
            raise SpecError(f"{key} is required")
    capacity = _text(t, "capacity", "on-demand")
    if capacity not in CAPACITY:
        raise SpecError(f"capacity {capacity!r}: one of {', '.join(CAPACITY)}")
    queued = t.get("queued", False)
    if not isinstance(queued, bool):
        raise SpecError("queued: true or false")
    valid_for = _text(t, "valid_for", "")
    if valid_for and not queued:
        raise SpecError("valid_for is a queued resource's window: set queued = true")
    count = t.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= MAX_COUNT:
        raise SpecError(f"count: a whole number from 0 to {MAX_COUNT}")
    reservation = _text(t, "reservation", "")
    if reservation and not queued:
        raise SpecError("reservation names a queued resource's reservation: set queued = true")
    return SlotSpec(
        name=name, accelerator_type=accel, runtime_version=_text(t, "runtime_version", ""),
        project=_text(t, "project", ""), zone=_text(t, "zone", ""), capacity=capacity,
        queued=queued, valid_for_s=parse_duration(valid_for) if valid_for else None,
        count=count, network=_text(t, "network", ""), subnetwork=_text(t, "subnetwork", ""),
        labels=_labels(t.get("labels", {})), reservation=reservation)


def _text(t: Mapping[str, Any], key: str, default: str) -> str:
    v = t.get(key, default)
    if not isinstance(v, str):
        raise SpecError(f"{key}: a string, got {type(v).__name__}")
    if len(v) > 1024 or any(c in v for c in "\n\r\0"):
        raise SpecError(f"{key}: one line of at most 1024 characters")
    return v


def _labels(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict) or len(raw) > 32:
        raise SpecError("labels: a table of at most 32 key = \"value\" pairs")
    out = {}
    for k, v in raw.items():
        if not isinstance(v, str) or not LABEL_KEY.fullmatch(k) or not LABEL_VALUE.fullmatch(v):
            raise SpecError(f"label {k!r}: keys and values are lowercase letters, digits, "
                            "- and _ (a key starts with a letter)")
        if k in RESERVED_LABELS:
            raise SpecError(f"label {k!r} is tpuq's own")
        out[k] = v
    return out


# ---- names the controller gives what it makes -------------------------------------------
def node_id(prefix: str, slot: str, idx: int, generation: int) -> str:
    """The node (and queued resource) id of one generation of a slot's VM: the same for
    every try of that generation, so a create repeated after a timeout or a restart
    finds the first one (409) instead of making a second VM."""
    return f"{prefix}-{slot}-{idx}-g{generation}"


def host_prefix(slot: str, idx: int) -> str:
    """The name its agents take, the same for every generation: `<slot>-<idx>-w<worker>`
    (the startup script adds the worker)."""
    return f"{slot}-{idx}"


def host_names(slot: str, idx: int, workers: int) -> list[str]:
    return [f"{host_prefix(slot, idx)}-w{w}" for w in range(max(1, workers))]
