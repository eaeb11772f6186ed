"""The fleet controller: one step reads the fleet, looks at the Cloud TPU API, decides per
member (reconcile.py) and acts; `run` repeats it under the leader lease.

Each member's step is recorded before its call is made (its generation, the id the call
uses, a lost VM's hosts and requeued jobs), in a transaction that also renews the lease,
so only the leader records and a restarted controller finds the call it may have made
(the same id: 409, or the same queued-resource request id). Then the call, then its
answer recorded. One member's failure never stops the others.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tpuq.fleet.port import ApiError, CreateRequest, NodeView, OpView, QueuedView, TpuApi
from tpuq.fleet.reconcile import Call, Member, Policy, Seen, Step, after_call, decide
from tpuq.fleet.records import NotLeader, Records
from tpuq.fleet.spec import SlotSpec, host_names, host_prefix, node_id
from tpuq.settings import Settings

log = logging.getLogger("tpuq.fleet")
LABEL = "tpuq-fleet"

@dataclass
class Boot:
    """What a new VM is given in its metadata to join the deployment by itself
    (workers/startup-script.sh reads these attributes)."""

    script: str
    database_url: str
    broker_url: str
    pip_spec: str = ""

    def metadata(self, slot: str, idx: int) -> dict[str, str]:
        md = {"startup-script": self.script, "tpuq-database-url": self.database_url,
              "tpuq-broker-url": self.broker_url, "tpuq-host-prefix": host_prefix(slot, idx)}
        if self.pip_spec:
            md["tpuq-pip-spec"] = self.pip_spec
        return md


@dataclass
class Observed:
    nodes: dict[str, NodeView] = field(default_factory=dict)
    queued: dict[str, QueuedView] = field(default_factory=dict)
    failed: dict[tuple[str, str], str] = field(default_factory=dict)  # location -> error


class Controller:
    def __init__(self, records: Records, settings: Settings, api: TpuApi, boot: Boot, *,
                 rng: random.Random | None = None,
                 on_requeue: Callable[[list[int]], None] = lambda ids: None,
                 clock: Callable[[], float] | None = None) -> None:
        self.records, self.settings, self.api, self.boot = records, settings, api, boot
        self.holder: str = getattr(records, "holder", "")
        self.rng = rng or random.Random()
        self.on_requeue = on_requeue
        # what `now` is for backoffs and join timeouts: the database clock (a test's fake
        # API runs on its own clock and passes it)
        self.clock = clock or records.now
        self.policy = Policy(settings.fleet_backoff_s, settings.fleet_backoff_max_s,
                             settings.fleet_join_s)
        self.leading = False
        self.calls = 0  # API calls that change something, made by this controller

    # ---- leadership ------------------------------------------------------------------------
    def keep_lease(self) -> bool:
        leading = self.records.keep_lease()
        if leading != self.leading:
            log.info("%s fleet leadership", "took" if leading else "lost")
        self.leading = leading
        return leading

    def resign(self) -> None:
        if self.leading:
            self.records.resign()
            self.leading = False

    # ---- one step --------------------------------------------------------------------------
    def step(self) -> int:
        """Reconcile every member once; how many calls were made. Nothing unless leading."""
        if not self.keep_lease():
            return 0
        prefix, specs, members = self.records.load()
        seen = self._observe(prefix, [sp for sp, _ in specs.values()])
        made = 0
        for m in members:
            entry = specs.get(m.slot)
            if entry is None:
                continue
            spec, removed = entry
            try:
                made += self._member(prefix, m, spec, removed, seen)
            except NotLeader:
                self.leading = False
                return made
        made += self._orphans(prefix, members, specs, seen)
        if any(removed for _, removed in specs.values()):
            # a removed slot's spec is kept while anything of it is listed: it says where
            # to delete it from
            views: list[NodeView | QueuedView] = [*seen.nodes.values(), *seen.queued.values()]
            listed = {v.labels.get("tpuq-slot", "") for v in views}
            self.records.drop_removed(keep=listed)
        return made

    def _observe(self, prefix: str, specs: Sequence[SlotSpec]) -> Observed:
        seen = Observed()
        places = {(sp.project, sp.zone): False for sp in specs}
        for sp in specs:
            places[(sp.project, sp.zone)] |= sp.queued
        for (project, zone), queued in sorted(places.items()):
            try:
                for n in self.api.list_nodes(project, zone):
                    if n.labels.get(LABEL) == prefix:
                        seen.nodes[n.name] = n
                if queued:
                    for q in self.api.list_queued(project, zone):
                        if q.labels.get(LABEL) == prefix:
                            seen.queued[q.name] = q
            except ApiError as e:
                seen.failed[(project, zone)] = e.message
        return seen

    def _member(self, prefix: str, m: Member, spec: SlotSpec, removed: bool,
                seen: Observed) -> int:
        if (spec.project, spec.zone) in seen.failed:
            return 0  # cannot see it: decide nothing on a partial view
        nid = node_id(prefix, m.slot, m.idx, m.generation)
        op = self._operation(m) if m.op_name and m.phase == "creating" else None
        node = seen.nodes.get(nid)
        qr = seen.queued.get(nid) if spec.queued else None
        hosts = host_names(m.slot, m.idx, spec.hosts)
        joined = node is not None and node.state == "READY" and self.records.joined(hosts)
        wanted = None if removed or m.idx >= spec.count else spec
        others: list[NodeView | QueuedView] = [*seen.nodes.values(), *seen.queued.values()]
        stale = any(v.labels.get("tpuq-slot") == m.slot and v.name != nid
                    and v.labels.get("tpuq-index") == str(m.idx) for v in others)
        step = decide(m, wanted, Seen(node, qr, op, joined, stale), self.clock(), self.policy)
        if step == Step(m):
            return 0  # nothing changed, nothing to call: no write (most steps of most members)
        requeued = self.records.record(m, step, hosts, nid, spec.chips)
        if step.lose:
            log.warning("%s/%d: %s: hosts lost, jobs requeued: %s", m.slot, m.idx, step.lose,
                        requeued or "none")
        if requeued:
            self.on_requeue(requeued)
        if step.call is None:
            return 0
        # the call is about the generation just recorded (a new one, after a deletion)
        result = self._call(step.call, spec, step.member,
                            node_id(prefix, m.slot, m.idx, step.member.generation), prefix)
        self.records.save(after_call(step.member, step.call, wanted, result, self.clock(),
                                     self.policy, self.rng.uniform(0.5, 1.0)))
        return 1

    def _operation(self, m: Member) -> OpView | None:
        try:
            return self.api.operation(m.op_name or "")
        except ApiError:
            return None

    def _call(self, call: Call, spec: SlotSpec, m: Member, nid: str,
              prefix: str) -> str | None | ApiError:
        self.calls += 1
        try:
            if call is Call.CREATE:
                labels = {**spec.labels, LABEL: prefix, "tpuq-slot": m.slot,
                          "tpuq-index": str(m.idx), "tpuq-generation": str(m.generation)}
                return self.api.create(CreateRequest(
                    spec=spec, node_id=nid, labels=labels,
                    metadata=self.boot.metadata(m.slot, m.idx),
                    request_id=request_id(prefix, nid, "create")))
            if call is Call.DELETE_QUEUED:
                return self.api.delete_queued(spec.project, spec.zone, nid,
                                              request_id(prefix, nid, "delete"))
            return self.api.delete_node(spec.project, spec.zone, nid)
        except ApiError as e:
            log.warning("%s/%d: %s %s: %s", m.slot, m.idx, call, nid, e.message)
            return e

    def _orphans(self, prefix: str, members: Sequence[Member],
                 specs: dict[str, tuple[SlotSpec, bool]], seen: Observed) -> int:
        """Delete what carries this fleet's label and is no member's current VM: left by
        an older generation or a removed member. Never two VMs for one slot."""
        current = {node_id(prefix, m.slot, m.idx, m.generation) for m in members}
        where = {m.slot: specs[m.slot][0] for m in members if m.slot in specs}
        made = 0
        for name, labels, state, queued in [
                *[(n.name, n.labels, n.state, False) for n in seen.nodes.values()
                  if not n.queued_resource],
                *[(q.name, q.labels, q.state, True) for q in seen.queued.values()]]:
            spec = where.get(labels.get("tpuq-slot", ""))
            if name in current or state == "DELETING" or spec is None:
                continue
            if not self.keep_lease():
                return made
            self.calls += 1
            made += 1
            log.warning("deleting %s: this fleet's, and no slot's current VM", name)
            try:
                if queued:
                    self.api.delete_queued(spec.project, spec.zone, name,
                                           request_id(prefix, name, "delete"))
                else:
                    self.api.delete_node(spec.project, spec.zone, name)
            except ApiError as e:
                log.warning("deleting %s: %s", name, e.message)
        return made

    # ---- the loop --------------------------------------------------------------------------
    def run(self, stop: Callable[[], bool]) -> None:
        """Step every TPUQ_FLEET_POLL_S until `stop()`; a failed step is logged, never fatal."""
        while not stop():
            started = time.monotonic()
            try:
                self.step()
            except Exception:  # noqa: BLE001 - the controller outlives any one failure
                log.exception("fleet step failed")
            wait = self.settings.fleet_poll_s - (time.monotonic() - started)
            deadline = time.monotonic() + max(0.0, wait)
            while not stop() and time.monotonic() < deadline:
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        self.resign()


def request_id(prefix: str, nid: str, verb: str) -> str:
    """The same UUID for every try of one call: the API makes the call once."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"tpuq-fleet:{prefix}:{nid}:{verb}"))
