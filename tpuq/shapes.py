"""Chip shapes: which chip counts a job may ask for on a host, and libtpu's bounds for each.

Stdlib only (and tpuq.records): the spec check at submit, the state layer, the
scheduler's placement and the agent's job environment all read this one table, so the
scheduler never places a job the agent cannot shape.
"""

from __future__ import annotations

from tpuq.records import Record


class Bounds(Record, frozen=True):
    """One chip shape of a host: TPU_CHIPS_PER_PROCESS_BOUNDS for `chips` chips, where
    that comes from, and whether a source confirms it. An unverified shape is offered
    only once the host's probe passed (agent/tpu/probes.py)."""

    chips: int
    bounds: str
    source: str
    verified: bool = False


_PT = "pytorch/xla torch_xla/_internal/tpu.py"
_JT = "jax jax/_src/test_multiprocess.py"
_JCI = "jax CI: single-chip tests run in parallel on v5e-8 and v6e-8"
_WHOLE = "the host's own layout (no subset variables are set for a whole host)"

# Per generation and host size: the shapes tpuq may offer (docs/tpu-facts.md says the
# same in words). Whole hosts get no bounds at all, so their entry is always safe.
TABLE: dict[tuple[str, int], tuple[Bounds, ...]] = {
    ("v4", 4): (Bounds(1, "1,1,1", _PT, True), Bounds(2, "1,2,1", f"{_JT}; {_PT}", True),
                Bounds(4, "2,2,1", _WHOLE, True)),
    # v2 and v3: 4 chips (2x2), two TensorCores each; subsets in no source
    ("v2", 4): (Bounds(1, "1,1,1", "as v4; unverified"), Bounds(2, "1,2,1", "as v4; unverified"),
                Bounds(4, "2,2,1", _WHOLE, True)),
    ("v3", 4): (Bounds(1, "1,1,1", "as v4; unverified"), Bounds(2, "1,2,1", "as v4; unverified"),
                Bounds(4, "2,2,1", _WHOLE, True)),
    ("v5p", 4): (Bounds(1, "1,1,1", "as v4; unverified"), Bounds(2, "1,2,1", "as v4; unverified"),
                 Bounds(4, "2,2,1", _WHOLE, True)),
    ("v5litepod", 1): (Bounds(1, "1,1,1", _WHOLE, True),),
    ("v5litepod", 4): (Bounds(1, "1,1,1", "as v6e-8; unverified"),
                       Bounds(2, "1,2,1", "unverified"), Bounds(4, "2,2,1", _WHOLE, True)),
    # no 4-chip subsets: jax's test says 2,2,1 on chips 0-3 "will not work with 4x2 v5e
    # LitePod", and no source gives the bounds that would
    ("v5litepod", 8): (Bounds(1, "1,1,1", _JCI, True), Bounds(2, "1,2,1", "unverified"),
                       Bounds(8, "2,4,1", _WHOLE, True)),
    ("v6e", 1): (Bounds(1, "1,1,1", _WHOLE, True),),
    ("v6e", 4): (Bounds(1, "1,1,1", "as v6e-8; unverified"), Bounds(2, "1,2,1", "unverified"),
                 Bounds(4, "2,2,1", _WHOLE, True)),
    ("v6e", 8): (Bounds(1, "1,1,1", _JCI, True), Bounds(2, "1,2,1", "unverified"),
                 Bounds(4, "2,2,1", f"{_JT} (2x4 v6e)", True), Bounds(8, "2,4,1", _WHOLE, True)),
    # TPU7x: 4 chips per VM, two TensorCores (two JAX devices) each; subsets in no source
    ("tpu7x", 4): (Bounds(1, "1,1,1", "unverified"), Bounds(2, "1,2,1", "unverified"),
                   Bounds(4, "2,2,1", _WHOLE, True)),
}

# Hosts of no known generation (off GCP, fake devices in tests, a type set by hand): the
# shapes by host size alone, as on the hosts of the table that have them.
BOUNDS: dict[int, dict[int, str]] = {
    1: {1: "1,1,1"},
    4: {1: "1,1,1", 2: "1,2,1", 4: "2,2,1"},
    8: {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,4,1"},
}


def shapes_of(host_chip_count: int, generation: str | None = None) -> dict[int, Bounds]:
    """The shapes a host may offer: its generation's row of TABLE, else BOUNDS by size."""
    row = TABLE.get((generation or "", host_chip_count))
    if row is not None:
        return {b.chips: b for b in row}
    return {n: Bounds(n, bounds, "by host size") for n, bounds in
            BOUNDS.get(host_chip_count, {}).items()}


def allowed_chip_counts(host_chip_count: int, generation: str | None = None) -> tuple[int, ...]:
    """Chip counts a job may ask for on a host with this many chips (the whole host
    always); a host without chips offers nothing. The scheduler narrows this by what the
    host itself says it does not offer (hosts.unavailable)."""
    if host_chip_count <= 0:
        return ()
    return tuple(sorted(set(shapes_of(host_chip_count, generation)) | {host_chip_count}))


def chip_bounds(n_chips: int, host_chip_count: int, generation: str | None = None) -> str:
    """TPU_CHIPS_PER_PROCESS_BOUNDS for `n_chips` on a `host_chip_count`-chip host."""
    shape = shapes_of(host_chip_count, generation).get(n_chips)
    if shape is None:
        allowed = ", ".join(str(n) for n in allowed_chip_counts(host_chip_count, generation))
        raise ValueError(
            f"cannot run a {n_chips}-chip job on a {host_chip_count}-chip host: "
            f"allowed chip counts are {allowed}"
        )
    return shape.bounds


# ---- TPU types ------------------------------------------------------------------------------
# A Cloud TPU type is "<family>-<n>". On v2, v3, v4 and v5p, n counts TensorCores (two per
# chip, four chips per host); on v5e ("v5litepod") and v6e it counts chips, and types of
# up to 8 chips are one host (larger ones are 4-chip hosts). TPU7x has two TensorCores per
# chip and 4 chips per VM; that its n counts TensorCores, as v5p's does, is unverified.
CORE_FAMILIES = frozenset({"v2", "v3", "v4", "v5p", "tpu7x"})
CHIP_FAMILIES = frozenset({"v5litepod", "v6e"})
# what tpu-info, JAX's CI and vLLM call v5e hosts ("v5e-8"), and GKE ("v5lite")
ALIASES = {"v5e": "v5litepod", "v5lite": "v5litepod"}
_SINGLE_HOST_CHIPS = (1, 4, 8)


def family(tpu_type: str) -> str:
    """Family of a type: "v4-8" -> "v4", "v5litepod-8" -> "v5litepod"; a type without a
    dash is its own family."""
    head, sep, _ = tpu_type.rpartition("-")
    return head if sep else tpu_type


def canonical(tpu_type: str) -> str:
    """The type in Google's Cloud TPU naming: "v5e-8" and "v5lite-8" are "v5litepod-8"."""
    head, sep, tail = tpu_type.rpartition("-")
    name = ALIASES.get(head if sep else tpu_type)
    if name is None:
        return tpu_type
    return f"{name}{sep}{tail}" if sep else name


def _size(tpu_type: str) -> int | None:
    _, sep, tail = tpu_type.rpartition("-")
    return int(tail) if sep and tail.isdigit() and int(tail) > 0 else None


def _valid(fam: str, n: int | None) -> bool:
    if n is None:
        return False
    if fam in CORE_FAMILIES:
        return n % 8 == 0
    return fam in CHIP_FAMILIES and (n in _SINGLE_HOST_CHIPS or n % 8 == 0)


def _examples(fam: str) -> str:
    if fam in CORE_FAMILIES:
        return f"{fam}-8 (one host), {fam}-16, {fam}-32, ... (TensorCores, a multiple of 8)"
    return (f"{fam}-1, {fam}-4, {fam}-8 (one host), {fam}-16, ... (chips: 1, 4 or a "
            "multiple of 8)")


def type_error(tpu_type: str) -> str | None:
    """Why `tpu_type` is not a Cloud TPU type (with the sizes of its own family, or the
    closest family), or None. Aliases are accepted (canonical)."""
    typed, tpu_type = tpu_type, canonical(tpu_type)
    fam, n = family(tpu_type), _size(tpu_type)
    if _valid(fam, n):
        return None
    import difflib  # only to name the closest family: every submit checks a valid type
    families = sorted(CORE_FAMILIES | CHIP_FAMILIES)
    if fam in families:
        guess = _nearest(fam, n)
        hint = f" (did you mean {fam}-{guess}?)" if guess else ""
        return f"unknown TPU type {typed!r}{hint}: {fam} types are {_examples(fam)}"
    close = difflib.get_close_matches(fam, [*families, *ALIASES], n=1, cutoff=0.5)
    if close:
        near = family(canonical(f"{close[0]}-{n or 8}"))
        if _valid(near, n):
            return (f"unknown TPU type {typed!r} (did you mean {near}-{n}?): {near} "
                    f"types are {_examples(near)}")
        return f"unknown TPU type {typed!r} (did you mean {near}? {_examples(near)})"
    return (f"unknown TPU type {typed!r} (e.g. v4-8, v5litepod-8 (or v5e-8), v6e-8; "
            f"families: {', '.join(families)})")


def _nearest(fam: str, n: int | None) -> int | None:
    """The valid size of `fam` closest to `n` (the smaller on a tie), for a hint."""
    if n is None:
        return None
    sizes = [k for k in range(1, 2 * n + 9) if _valid(fam, k)]
    return min(sizes, key=lambda k: (abs(k - n), k)) if sizes else None


def host_chips(tpu_type: str) -> int | None:
    """Chips on one host of a known type (None for an unknown type)."""
    tpu_type = canonical(tpu_type)
    if type_error(tpu_type) is not None:
        return None
    n = _size(tpu_type) or 0
    if family(tpu_type) in CHIP_FAMILIES and n in _SINGLE_HOST_CHIPS:
        return n
    return 4


def slice_hosts(tpu_type: str) -> int:
    """Hosts (workers) in a slice of a known type: 1 for a single-host type, e.g. 4 for
    v4-32 (16 chips of 4 per host) or v5litepod-16; 0 for an unknown type."""
    tpu_type = canonical(tpu_type)
    per_host = host_chips(tpu_type)
    if per_host is None:
        return 0
    n = _size(tpu_type) or 0
    chips = n // 2 if family(tpu_type) in CORE_FAMILIES else n
    return max(1, chips // per_host)


class Seat(Record, frozen=True):
    """A host's place in a multi-host slice: the slice, which worker of it, its type.
    A host's own (agent/gce/topology.py), and a slice job's task's (its worker's row)."""

    slice: str
    worker: int
    tpu_type: str  # the slice's type, e.g. "v4-32"
    hosts: int = 0  # workers in the slice when known apart from its type (a job's row)

    @property
    def workers(self) -> int:
        return self.hosts or slice_hosts(self.tpu_type)
