"""The controller's records kept in memory, and the fake API called directly: the same
step, minus SQL and HTTP, so the property test runs a thousand sequences in seconds.
A "restart" keeps the records (they are what the database would hold) and drops the
controller object; a lease holder of another name is refused, as by the database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tests.fakes.tpu_api import FakeCloud, Hang, HttpFault
from tpuq.fleet.gcp import _said
from tpuq.fleet.port import (
    ApiError,
    CreateRequest,
    ErrorKind,
    NodeView,
    OpView,
    QueuedView,
    kind_of_http,
)
from tpuq.fleet.reconcile import Member, Step, retired
from tpuq.fleet.records import NotLeader
from tpuq.fleet.spec import FleetFile, SlotSpec


class MemoryRecords:
    def __init__(self) -> None:
        self.prefix = "tpuq"
        self.specs: dict[str, tuple[SlotSpec, bool]] = {}
        self.members: dict[tuple[str, int], Member] = {}
        self.holder: str | None = None
        self.me = "c1"
        self.lost: list[tuple[str, str]] = []  # (host, why)
        self.vms_up: list[str] = []
        self.vms_gone: list[str] = []

    def apply(self, fleet: FleetFile) -> None:
        self.prefix = fleet.prefix
        wanted = {s.name: s for s in fleet.slots}
        for name, (spec, _) in list(self.specs.items()):
            if name not in wanted:
                self.specs[name] = (spec, True)
        for spec in fleet.slots:
            self.specs[spec.name] = (spec, False)
            for i in range(spec.count):
                self.members.setdefault((spec.name, i), Member(spec.name, i))

    def keep_lease(self) -> bool:
        if self.holder in (None, self.me):
            self.holder = self.me
            return True
        return False

    def load(self) -> tuple[str, dict[str, tuple[SlotSpec, bool]], list[Member]]:
        return self.prefix, dict(self.specs), [self.members[k] for k in sorted(self.members)]

    def joined(self, hosts: Sequence[str]) -> bool:
        return False

    def record(self, m: Member, step: Step, hosts: Sequence[str], node_id: str,
               chips: int) -> list[int]:
        if not self.keep_lease():
            raise NotLeader()
        self.members[(m.slot, m.idx)] = step.member
        if step.lose:
            self.lost += [(h, step.lose) for h in hosts]
        if step.vm_up:
            self.vms_up.append(node_id)
        if step.vm_gone:
            self.vms_gone.append(node_id)
        return []

    def save(self, m: Member) -> None:
        if not self.keep_lease():
            raise NotLeader()
        if (m.slot, m.idx) in self.members:
            self.members[(m.slot, m.idx)] = m

    def drop_removed(self, keep: set[str]) -> None:
        left = {slot for (slot, _), m in self.members.items() if not retired(m)} | keep
        self.specs = {n: v for n, v in self.specs.items() if not v[1] or n in left}

    def now(self) -> float:
        return 0.0

    def resign(self) -> None:
        self.holder = None


class DirectApi:
    """TpuApi straight onto the fake's routes (the JSON the REST client would parse)."""

    def __init__(self, cloud: FakeCloud) -> None:
        self.cloud = cloud

    def _ask(self, method: str, path: str, query: Mapping[str, str] | None = None,
             body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            return self.cloud.request(method, path, dict(query or {}), body)
        except HttpFault as e:
            raise ApiError(kind_of_http(e.status, _said(e.message)),
                           f"HTTP {e.status}: {e.message}") from None
        except Hang:
            raise ApiError(ErrorKind.TRANSIENT, "ReadTimeout: the API did not answer") from None

    def list_nodes(self, project: str, zone: str) -> list[NodeView]:
        got = self._ask("GET", f"/v2/projects/{project}/locations/{zone}/nodes")
        return [NodeView(n["name"].rsplit("/", 1)[1], n["state"], n.get("health", ""),
                         dict(n.get("labels", {})),
                         n.get("queuedResource", "").rsplit("/", 1)[-1])
                for n in got.get("nodes", [])]

    def list_queued(self, project: str, zone: str) -> list[QueuedView]:
        got = self._ask("GET", f"/v2/projects/{project}/locations/{zone}/queuedResources")
        out = []
        for q in got.get("queuedResources", []):
            err = q["state"].get("failedData", {}).get("error", {})
            out.append(QueuedView(q["name"].rsplit("/", 1)[1], q["state"]["state"],
                                  dict(q["tpu"]["nodeSpec"][0]["node"].get("labels", {})),
                                  err.get("code"), err.get("message", "")))
        return out

    def create(self, req: CreateRequest) -> str:
        sp = req.spec
        parent = f"/v2/projects/{sp.project}/locations/{sp.zone}"
        node: dict[str, Any] = {"acceleratorType": sp.accelerator_type,
                                "runtimeVersion": sp.runtime_version,
                                "labels": dict(req.labels), "metadata": dict(req.metadata)}
        if sp.capacity == "spot":
            node["schedulingConfig"] = {"spot": True}
        if not sp.queued:
            return self._ask("POST", f"{parent}/nodes", {"nodeId": req.node_id}, node)["name"]
        body = {"tpu": {"nodeSpec": [{"parent": parent[4:], "nodeId": req.node_id,
                                      "node": node}]}}
        return self._ask("POST", f"{parent}/queuedResources",
                         {"queuedResourceId": req.node_id, "requestId": req.request_id},
                         body)["name"]

    def delete_node(self, project: str, zone: str, node_id: str) -> str | None:
        return self._delete(f"/v2/projects/{project}/locations/{zone}/nodes/{node_id}", {})

    def delete_queued(self, project: str, zone: str, qr_id: str, request_id: str) -> str | None:
        return self._delete(f"/v2/projects/{project}/locations/{zone}/queuedResources/{qr_id}",
                            {"force": "true", "requestId": request_id})

    def _delete(self, path: str, query: dict[str, str]) -> str | None:
        try:
            return str(self._ask("DELETE", path, query)["name"])
        except ApiError as e:
            if e.api_kind is ErrorKind.NOT_FOUND:
                return None
            raise

    def operation(self, name: str) -> OpView:
        op = self._ask("GET", f"/v2/{name}")
        err = op.get("error")
        if op.get("done") and err:
            return OpView(name, True, err["code"], err["message"])
        return OpView(name, bool(op.get("done")))
