"""Free-chip index of the hosts for one planning pass (pure, stdlib only).

Chip blocks: a job asking N chips on a 4- or 8-chip host takes the chips at positions
i..i+N-1 of the host's sorted chip indices, with i a multiple of N (aligned, buddy-style).
That keeps the bounds of TPU_FACTS.md valid (a 2-chip job gets a 1x2 pair, a 4-chip job
a 2x2 quad) without modelling the physical torus. Among free aligned blocks we take the
one whose buddy (the other half of the enclosing 2N block) is busiest, so small jobs
pack into already-broken blocks and larger aligned blocks stay free.

Best fit: among hosts that can take the block we pick the one with the fewest free chips,
so small jobs fill partly used hosts and whole hosts stay whole.

Index: `fit[(host_type, need)][free_count]` is an insertion-ordered set of hosts that
currently have a free aligned block of `need` chips (need 0 = the whole host, bucketed by
host size so the smallest whole host wins). Free chips only shrink during a pass, so an
empty (type, need) entry stays empty: one dict lookup rejects a job for lack of room.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tpuq.scheduler.views import HostView
from tpuq.shapes import allowed_chip_counts

WHOLE = 0  # need key meaning "the whole host"
Key = tuple[str | None, int]  # (host tpu_type, need); type None = unknown host type
QuotaOk = Callable[[str | None, int], bool]  # (host type, chips) -> may the job take them


def need_key(chips: int | None) -> int:
    """Index key of a request: WHOLE for None, -1 (never offered) for nonsense counts."""
    if chips is None:
        return WHOLE
    return chips if chips > 0 else -1


INF = float("inf")


class Host:
    __slots__ = ("allowed", "chips", "draining", "entries", "free", "free_at", "n", "name",
                 "schedulable", "type", "why_not")

    def __init__(self, view: HostView) -> None:
        self.name = view.name
        self.type = view.tpu_type
        self.chips = tuple(sorted(set(view.chips)))
        self.n = len(self.chips)
        self.allowed = tuple(n for n in allowed_chip_counts(self.n) if n not in view.withheld)
        self.free = set(view.free).intersection(self.chips)
        self.schedulable = view.schedulable
        self.draining = view.draining
        self.why_not = view.out_of_service or "out of service"
        self.free_at = view.free_at
        self.entries: list[tuple[Key, int]] = []

    def size_for(self, need: int) -> int:
        return self.n if need == WHOLE else need

    def blocks(self, need: int) -> Iterable[tuple[int, tuple[int, ...]]]:
        """(position, chips) of every aligned block of `need` chips (free or not)."""
        size = self.size_for(need)
        if size not in self.allowed:
            return ()
        return ((i, self.chips[i : i + size]) for i in range(0, self.n, size))

    def has_block(self, need: int) -> bool:
        if len(self.free) < self.size_for(need):
            return False
        return any(self.free.issuperset(b) for _, b in self.blocks(need))

    def busy_in_best_block(self, need: int) -> int | None:
        """Fewest busy chips over aligned blocks: how far the host is from fitting."""
        counts = [sum(c not in self.free for c in b) for _, b in self.blocks(need)]
        return min(counts) if counts else None

    def start_estimate(self, need: int, now: float) -> float:
        """Earliest time some aligned block of `need` chips is all free, from the busy
        chips' time limits: `now` if one is free, INF when every block waits on a job
        without a time limit (or the host has no such block)."""
        best = INF
        for _, block in self.blocks(need):
            t = max((now if c in self.free else self.free_at.get(c, INF) for c in block),
                    default=now)
            best = min(best, max(t, now))
        return best

    def pick_block(self, need: int) -> tuple[int, ...]:
        size = self.size_for(need)
        best: tuple[int, ...] = ()
        best_busy = -1
        for i, block in self.blocks(need):
            if not self.free.issuperset(block):
                continue
            start = i - i % (2 * size)
            buddy = self.chips[start : start + 2 * size] if 2 * size <= self.n else ()
            busy = sum(c not in self.free for c in buddy)
            if busy > best_busy:
                best, best_busy = block, busy
        return best


class Pool:
    """Schedulable hosts with free chips, indexed for best-fit lookups."""

    def __init__(self, views: Iterable[HostView]) -> None:
        self.hosts = [Host(v) for v in views]
        self.fit: dict[Key, dict[int, dict[Host, None]]] = {}
        self.any_count: dict[int, int] = {}  # need -> hosts of any type with room
        self.by_type: dict[str | None, list[Host]] = {}
        self.offered: set[Key] = set()  # job view: (job tpu_type or None=any, need)
        self.min_whole: dict[str | None, int] = {}  # smallest host per job type key
        self.reserved: dict[str, int] = {}  # host name -> job id
        # host, job id, waiting since, estimated start of the reservation (INF: unknown)
        self.reserved_hosts: list[tuple[Host, int, float, float]] = []
        for h in self.hosts:
            self._offer(h)
            if h.schedulable and h.n:
                self.by_type.setdefault(h.type, []).append(h)
                self._index(h)
        self.types = list(self.by_type)
        self.out = [h for h in self.hosts if h.n and not h.schedulable]
        self.named = {h.name: h for h in self.hosts}

    def takes_at(self, h: Host, job_type: str | None, need: int) -> bool:
        """Whether `h` itself can take the request now (a job that prefers that host)."""
        return h.schedulable and h.n > 0 and h.name not in self.reserved and \
            job_type in (None, h.type) and h.has_block(need)

    def out_of_service(self, job_type: str | None, need: int) -> str | None:
        """When only hosts out of service could ever take the request: which and why."""
        fits = [h for h in self.hosts if h.n and job_type in (None, h.type)
                and h.size_for(need) in h.allowed]
        if not fits or any(h.schedulable for h in fits):
            return None
        return "; ".join(f"{h.name} {h.why_not}" for h in fits[:3]) + \
            (f" (+{len(fits) - 3} more)" if len(fits) > 3 else "")

    def _offer(self, h: Host) -> None:
        if not h.n:
            return
        for t in {h.type, None}:
            whole = (WHOLE,) if h.n in h.allowed else ()
            self.offered.update((t, need) for need in (*whole, *h.allowed))
            self.min_whole[t] = min(self.min_whole.get(t, h.n), h.n)

    def _index(self, h: Host) -> None:
        fc = len(h.free)
        entries: list[tuple[Key, int]] = []
        if fc and fc == h.n and h.n in h.allowed:
            entries.append(((h.type, WHOLE), h.n))
        entries.extend(((h.type, need), fc) for need in h.allowed if h.has_block(need))
        for key, slot in entries:
            self.fit.setdefault(key, {}).setdefault(slot, {})[h] = None
            self.any_count[key[1]] = self.any_count.get(key[1], 0) + 1
        h.entries = entries

    def _unindex(self, h: Host) -> None:
        for key, slot in h.entries:
            buckets = self.fit[key]
            del buckets[slot][h]
            if not buckets[slot]:
                del buckets[slot]
                if not buckets:
                    del self.fit[key]
            left = self.any_count[key[1]] - 1
            if left:
                self.any_count[key[1]] = left
            else:
                del self.any_count[key[1]]
        h.entries = []

    def has_room(self, job_type: str | None, need: int) -> bool:
        if job_type is None:
            return need in self.any_count
        return (job_type, need) in self.fit

    def best(self, job_type: str | None, need: int, ok: QuotaOk | None) -> Host | None:
        """Best-fit host for the request whose type/size the team's quota allows."""
        found: Host | None = None
        found_fc = 0
        for t in self.types if job_type is None else (job_type,):
            buckets = self.fit.get((t, need))
            if not buckets:
                continue
            for fc in sorted(buckets):
                if found is not None and fc >= found_fc:
                    break
                if ok is None or ok(t, fc if need == WHOLE else need):
                    found, found_fc = next(iter(buckets[fc])), fc
                    break
                if need != WHOLE:
                    break  # quota does not depend on the bucket: nothing else of type t
        return found

    def take(self, h: Host, need: int) -> tuple[int, ...]:
        block = h.pick_block(need)
        self._unindex(h)
        h.free.difference_update(block)
        if h.name not in self.reserved:  # a reserved host stays out of the index
            self._index(h)
        return block

    def drain_candidate(self, job_type: str | None, need: int, ok: QuotaOk,
                        now: float) -> tuple[Host, float] | None:
        """(host, estimated start) where the request would fit soonest: the earliest
        estimated start from the busy chips' time limits, then the fewest busy chips."""
        best: tuple[Host, float] | None = None
        best_key = (INF, 0, 0)
        for t in self.types if job_type is None else (job_type,):
            for h in self.by_type.get(t, ()):
                busy = h.busy_in_best_block(need)
                if busy is None or h.name in self.reserved or not ok(t, h.size_for(need)):
                    continue
                start = h.start_estimate(need, now)
                key = (start, busy, -len(h.free))
                if best is None or key < best_key:
                    best, best_key = (h, start), key
        return best

    def reserve(self, h: Host, job_id: int, since: float, start: float) -> None:
        """Keep the host's free chips for `job_id`, which should start there at `start`:
        later jobs of this pass take them only to backfill (see `backfill`)."""
        self._unindex(h)
        self.reserved[h.name] = job_id
        self.reserved_hosts.append((h, job_id, since, start))

    @property
    def backfillable(self) -> bool:
        return any(h.free for h, _, _, _ in self.reserved_hosts)

    def backfill(self, job_type: str | None, need: int, ends_at: float,
                 ok: QuotaOk) -> Host | None:
        """A reserved host whose free chips a job ending at `ends_at` may use: it gives
        them back before the reservation's estimated start (SLURM's backfill rule).
        Best fit: the fewest free chips."""
        found: Host | None = None
        for h, _, _, start in self.reserved_hosts:
            if ends_at > start or job_type not in (None, h.type) or not h.has_block(need):
                continue
            if ok(h.type, h.size_for(need)) and (found is None or len(h.free) < len(found.free)):
                found = h
        return found
