"""Multi-host slices for one planning pass (pure, stdlib only).

A slice job takes every chip of every worker of one slice, or nothing: its workers run
one program that finds its peers, so a partial slice is useless and holding part of one
would only block others. A slice is offered when it is complete (every worker of its
type has registered), every worker is in service, and no chip of it is in use. Slice
workers take slice jobs only: on a pod slice, libtpu on one worker waits for its peers.

No reservations: every job on a slice takes the whole slice, so no smaller job can
starve a slice job of one; among slice jobs the pass's order (fair share, priority,
age) decides who goes first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tpuq.scheduler.views import HostView
from tpuq.shapes import slice_hosts

QuotaOk = Callable[[int], bool]  # chips -> may the job take them


class Slice:
    __slots__ = ("hosts", "name", "taken", "type", "workers")

    def __init__(self, name: str, tpu_type: str | None, hosts: list[HostView]) -> None:
        self.name = name
        self.type = tpu_type
        self.hosts = sorted(hosts, key=lambda h: h.worker)
        self.workers = slice_hosts(tpu_type) if tpu_type else 0
        self.taken = False

    @property
    def chips(self) -> int:
        return sum(len(h.chips) for h in self.hosts)

    def missing(self) -> str | None:
        """Why the slice is not complete, or None."""
        have = sorted({h.worker for h in self.hosts})
        if self.workers and have == list(range(self.workers)):
            return None
        lost = [str(w) for w in range(self.workers) if w not in have]
        return f"slice {self.name}: {len(have)} of {self.workers or '?'} workers registered" + (
            f" (no worker {', '.join(lost)})" if lost else "")

    def out_of_service(self) -> str | None:
        out = [h for h in self.hosts if not h.schedulable]
        if not out:
            return None
        return f"slice {self.name}: " + "; ".join(
            f"worker {h.worker} ({h.name}) {h.out_of_service or 'out of service'}"
            for h in out[:3]) + (f" (+{len(out) - 3} more)" if len(out) > 3 else "")

    def draining(self) -> bool:
        return any(h.draining for h in self.hosts)

    def busy(self) -> bool:
        return self.taken or any(len(h.free) < len(h.chips) for h in self.hosts)

    def usable(self) -> bool:
        return self.missing() is None and self.out_of_service() is None and not self.busy()


class SlicePool:
    """The slices of a pass, by type, and which of them this pass has given out."""

    def __init__(self, views: Iterable[HostView]) -> None:
        grouped: dict[str, list[HostView]] = {}
        for v in views:
            if v.slice is not None:
                grouped.setdefault(v.slice, []).append(v)
        self.by_type: dict[str | None, list[Slice]] = {}
        for name, hosts in sorted(grouped.items()):
            types = {h.slice_type for h in hosts}
            sl = Slice(name, types.pop() if len(types) == 1 else None, hosts)
            self.by_type.setdefault(sl.type, []).append(sl)
        self.free = sum(sl.usable() for sls in self.by_type.values() for sl in sls)

    def offers(self, tpu_type: str | None) -> bool:
        return bool(self.by_type.get(tpu_type))

    def named(self, name: str) -> Slice | None:
        return next((sl for sls in self.by_type.values() for sl in sls if sl.name == name),
                    None)

    def find(self, tpu_type: str | None, ok: QuotaOk) -> Slice | None:
        """A usable slice of the type whose chips the team's quota allows."""
        for sl in self.by_type.get(tpu_type, ()):
            if sl.usable() and ok(sl.chips):
                return sl
        return None

    def take(self, sl: Slice) -> tuple[tuple[str, tuple[int, ...]], ...]:
        sl.taken = True
        self.free -= 1
        return tuple((h.name, tuple(sorted(h.chips))) for h in sl.hosts)

    def why_not(self, tpu_type: str | None) -> str:
        """Why no slice of the type is usable now, in words (the job has no quota issue)."""
        slices = self.by_type.get(tpu_type, [])
        if not slices:
            return f"no {tpu_type} slice has registered (its workers' agents register it)"
        for words in (Slice.missing, Slice.out_of_service):
            said = [w for w in map(words, slices) if w]
            if len(said) == len(slices):
                return said[0] + (f" (+{len(said) - 1} more slices)" if len(said) > 1 else "")
        names = ", ".join(sl.name for sl in slices[:3])
        return f"waiting for a free {tpu_type} slice ({names} in use)"
