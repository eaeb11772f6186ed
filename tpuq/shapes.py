"""Chip shapes: which chip counts a job may ask for on a host, and libtpu's bounds for each.

Stdlib only and free of tpuq imports: the spec check at submit, the state layer, the
scheduler's placement and the agent's job environment all read this one table, so the
scheduler never places a job the agent cannot shape.
"""

from __future__ import annotations

# Per-process chip bounds by host size (pytorch/xla `_internal/tpu.py`, jax
# `test_multiprocess.py`). Unverified: 2 chips on an 8-chip host ("1,2,1"); TPU_FACTS
# lists only 1, 4 and 8 there. A 1-chip host has no subsets but a shape all the same.
BOUNDS: dict[int, dict[int, str]] = {
    1: {1: "1,1,1"},
    4: {1: "1,1,1", 2: "1,2,1", 4: "2,2,1"},
    8: {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,4,1"},
}


def allowed_chip_counts(host_chip_count: int) -> tuple[int, ...]:
    """Chip counts a job may ask for on a host with this many chips (the whole host
    always); a host without chips offers nothing."""
    if host_chip_count <= 0:
        return ()
    return tuple(sorted(set(BOUNDS.get(host_chip_count, {})) | {host_chip_count}))


def chip_bounds(n_chips: int, host_chip_count: int) -> str:
    """TPU_CHIPS_PER_PROCESS_BOUNDS for `n_chips` on a `host_chip_count`-chip host."""
    shape = BOUNDS.get(host_chip_count, {}).get(n_chips)
    if shape is None:
        allowed = ", ".join(str(n) for n in allowed_chip_counts(host_chip_count))
        raise ValueError(
            f"cannot run a {n_chips}-chip job on a {host_chip_count}-chip host: "
            f"allowed chip counts are {allowed}"
        )
    return shape


# ---- TPU types ------------------------------------------------------------------------------
# A Cloud TPU type is "<family>-<n>". On v2, v3, v4 and v5p, n counts TensorCores (two per
# chip, four chips per host); on v5e ("v5litepod") and v6e it counts chips, and types of
# up to 8 chips are one host (larger ones are 4-chip hosts). TPU_FACTS.md, "Device files".
CORE_FAMILIES = frozenset({"v2", "v3", "v4", "v5p"})
CHIP_FAMILIES = frozenset({"v5litepod", "v6e"})
_SINGLE_HOST_CHIPS = (1, 4, 8)


def family(tpu_type: str) -> str:
    """Family of a type: "v4-8" -> "v4", "v5litepod-8" -> "v5litepod"; a type without a
    dash is its own family."""
    head, sep, _ = tpu_type.rpartition("-")
    return head if sep else tpu_type


def _size(tpu_type: str) -> int | None:
    _, sep, tail = tpu_type.rpartition("-")
    return int(tail) if sep and tail.isdigit() and int(tail) > 0 else None


def type_error(tpu_type: str) -> str | None:
    """Why `tpu_type` is not a Cloud TPU type (with the closest one), or None."""
    import difflib

    fam, n = family(tpu_type), _size(tpu_type)
    if fam in CORE_FAMILIES and n is not None and n % 8 == 0:
        return None
    if fam in CHIP_FAMILIES and n is not None and (n in _SINGLE_HOST_CHIPS or n % 8 == 0):
        return None
    known = [f"{f}-8" for f in sorted(CORE_FAMILIES)] + \
            [f"{f}-{k}" for f in sorted(CHIP_FAMILIES) for k in _SINGLE_HOST_CHIPS]
    close = difflib.get_close_matches(tpu_type, known, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]}?)" if close else \
        f" (e.g. {', '.join(known[:3])}, v6e-8; families: " \
        f"{', '.join(sorted(CORE_FAMILIES | CHIP_FAMILIES))})"
    return f"unknown TPU type {tpu_type!r}{hint}"


def host_chips(tpu_type: str) -> int | None:
    """Chips on one host of a known type (None for an unknown type)."""
    if type_error(tpu_type) is not None:
        return None
    n = _size(tpu_type) or 0
    if family(tpu_type) in CHIP_FAMILIES and n in _SINGLE_HOST_CHIPS:
        return n
    return 4


def slice_hosts(tpu_type: str) -> int:
    """Hosts (workers) in a slice of a known type: 1 for a single-host type, e.g. 4 for
    v4-32 (16 chips of 4 per host) or v5litepod-16; 0 for an unknown type."""
    per_host = host_chips(tpu_type)
    if per_host is None:
        return 0
    n = _size(tpu_type) or 0
    chips = n // 2 if family(tpu_type) in CORE_FAMILIES else n
    return max(1, chips // per_host)
