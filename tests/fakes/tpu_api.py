"""A fake Cloud TPU API v2: nodes, queued resources and long-running operations as a
state machine, with faults a test injects. `tpu_http.py` serves it over HTTP (and
in-process to a requests session) to the real google-cloud-tpu client.

Shapes follow the API reference, cloud.google.com/tpu/docs/reference/rest/v2 (cited per
shape below as REF/<page>); errors follow Google's JSON error format
(cloud.google.com/apis/design/errors#http_mapping). What the reference does not say is
marked as the fake's own choice.

Time is the fake's clock (`now`, settable), so a test or the property test moves it on
without sleeping; every request first applies what is due (`settle`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

# google.rpc.Code (googleapis google/rpc/code.proto) and its HTTP mapping (errors doc)
RPC = {"INVALID_ARGUMENT": (3, 400), "NOT_FOUND": (5, 404), "ALREADY_EXISTS": (6, 409),
       "PERMISSION_DENIED": (7, 403), "RESOURCE_EXHAUSTED": (8, 429),
       "FAILED_PRECONDITION": (9, 400), "INTERNAL": (13, 500), "UNAVAILABLE": (14, 503)}
# a stockout: the create operation fails with code 8 after the node showed CREATING
# (terraform's TPU tests, GoogleCloudPlatform/magic-modules#7297: "Error code 8, message:
# There is no more capacity in the zone "us-central1-b"; you can try in another zone ...")
STOCKOUT = ('There is no more capacity in the zone "{zone}"; you can try in another zone '
            'where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions)')
# a quota: HTTP 429 at the create call (marin-community/marin#1612: "HttpError 429 ...
# Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0
# in region us-east5.")
QUOTA = "Quota limit 'TPUV4PodPerProjectPerZoneForTPUAPI' has been exceeded. Limit: 0 in zone {zone}."


class HttpFault(Exception):
    """An error reply: HTTP status and Google's error body."""

    def __init__(self, rpc: str, message: str) -> None:
        super().__init__(message)
        self.code, self.status = RPC[rpc]
        self.rpc, self.message = rpc, message

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.status, "message": self.message, "status": self.rpc}}


class Hang(Exception):
    """The fake's way to say "answer nothing until the client gives up" (a timeout)."""


@dataclass
class Faults:
    stockouts: int = 0  # the next N creates fail in their operation, code 8 (as above)
    quota_errors: int = 0  # the next N creates answer 429 at the call
    api_errors: int = 0  # the next N requests of any kind answer 503 UNAVAILABLE
    timeouts: int = 0  # the next N requests hang until the client times out
    permission_denied: bool = False  # every create answers 403
    create_s: float = 5.0  # a node is CREATING this long (slow creates: raise it)
    delete_s: float = 1.0  # and DELETING this long
    preempt_at: dict[str, float] = field(default_factory=dict)  # node id -> fake time


@dataclass
class Counters:
    creates: dict[str, int] = field(default_factory=dict)  # node id -> VMs made under it
    create_calls: int = 0
    requests: int = 0


class FakeCloud:
    def __init__(self, now: float = 1_800_000_000.0,
                 clock: Callable[[], float] | None = None) -> None:
        """`clock`: follow it (time.time for end-to-end tests) instead of `advance`."""
        self.clock = clock
        self.now = clock() if clock else now
        self.faults = Faults()
        self.count = Counters()
        self.nodes: dict[str, dict[str, Any]] = {}  # resource name -> REST Node
        self.queued: dict[str, dict[str, Any]] = {}  # resource name -> REST QueuedResource
        self.ops: dict[str, dict[str, Any]] = {}
        self._due: dict[str, float] = {}  # resource name -> when its next step is due
        self._stockout_op: set[str] = set()  # create ops that fail at their step
        self._op_of: dict[str, str] = {}  # resource name -> its create or delete operation
        self._requests: dict[str, str] = {}  # queued-resource request id -> operation
        self._ids = itertools.count(1)
        self.lock = threading.RLock()
        # the VMs: told when a node becomes READY and when it stops serving (a test
        # starts and stops an agent process there)
        self.on_ready: Callable[[dict[str, Any]], None] = lambda node: None
        self.on_gone: Callable[[dict[str, Any]], None] = lambda node: None

    # ---- the test's levers -------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds
            self.settle()

    def preempt(self, node_id: str, *, spot: bool | None = None) -> bool:
        """A preemption: a preemptible node goes READY -> PREEMPTED; a spot node is
        deleted (TPU_FACTS "Spot TPU VMs are deleted, not restarted"). A node made by a
        queued resource takes its request to SUSPENDED (the fake's choice of the reference's
        "SUSPENDED: the request is suspended and the resources are reclaimed")."""
        with self.lock:
            name = self._node_named(node_id)
            if name is None or self.nodes[name]["state"] != "READY":
                return False
            node = self.nodes[name]
            is_spot = node.get("schedulingConfig", {}).get("spot", False) if spot is None else spot
            qr = node.get("queuedResource")
            if qr and qr in self.queued:
                self._set_qr(qr, "SUSPENDED", "suspendedData", {})
            if is_spot:
                del self.nodes[name]
            else:
                node["state"] = "PREEMPTED"
            self.on_gone(node)
            return True

    def suspend(self, qr_id: str) -> bool:
        with self.lock:
            name = next((n for n in self.queued if n.endswith(f"/{qr_id}")), None)
            if name is None:
                return False
            self._set_qr(name, "SUSPENDED", "suspendedData", {})
            for node in list(self.nodes.values()):
                if node.get("queuedResource") == name and node["state"] == "READY":
                    node["state"] = "PREEMPTED"
                    self.on_gone(node)
            return True

    def live_nodes(self) -> list[dict[str, Any]]:
        return [n for n in self.nodes.values() if n["state"] not in ("DELETING",)]

    # ---- requests (tpu_http.py routes here) ---------------------------------------------
    def request(self, method: str, path: str, query: dict[str, str],
                body: dict[str, Any] | None) -> dict[str, Any]:
        with self.lock:
            self.count.requests += 1
            self.settle()
            if self.faults.timeouts:
                self.faults.timeouts -= 1
                raise Hang()
            if self.faults.api_errors:
                self.faults.api_errors -= 1
                raise HttpFault("UNAVAILABLE", "The service is currently unavailable.")
            return self._route(method, path.strip("/").split("/"), query, body or {})

    def _route(self, method: str, p: list[str], q: dict[str, str],
               body: dict[str, Any]) -> dict[str, Any]:
        # paths: google-cloud-tpu tpu_v2 rest_base.py (the http rules of each method)
        if len(p) < 6 or p[0] != "v2" or p[1] != "projects" or p[3] != "locations":
            raise HttpFault("NOT_FOUND", f"no such path /{'/'.join(p)}")
        parent = "/".join(p[1:5])
        kind, rest = p[5], p[6:]
        if kind == "nodes" and not rest:
            if method == "GET":
                return self._list(self.nodes, parent, "nodes")
            return self._create_node(parent, q.get("nodeId", ""), body)
        if kind == "queuedResources" and not rest:
            if method == "GET":
                return self._list(self.queued, parent, "queuedResources")
            return self._create_qr(parent, q.get("queuedResourceId", ""), q.get("requestId", ""),
                                   body)
        if kind in ("nodes", "queuedResources", "operations") and len(rest) == 1:
            name = f"{parent}/{kind}/{rest[0]}"
            if method == "GET":
                table = {"nodes": self.nodes, "queuedResources": self.queued,
                         "operations": self.ops}[kind]
                if name not in table:
                    raise HttpFault("NOT_FOUND", f"Resource '{name}' was not found")
                return table[name]  # type: ignore[no-any-return]
            if method == "DELETE" and kind == "nodes":
                return self._delete_node(name)
            if method == "DELETE" and kind == "queuedResources":
                return self._delete_qr(name, q.get("force") == "true")
        raise HttpFault("NOT_FOUND", f"no such method {method} /{'/'.join(p)}")

    def _list(self, table: dict[str, dict[str, Any]], parent: str, key: str) -> dict[str, Any]:
        # REF/projects.locations.nodes/list: {"nodes": [...], "nextPageToken": ...}
        return {key: [v for k, v in table.items() if k.startswith(parent + "/")]}

    # ---- nodes -------------------------------------------------------------------------
    def _create_node(self, parent: str, node_id: str, body: dict[str, Any],
                     qr: str | None = None) -> dict[str, Any]:
        if qr is None:
            self._admit_create(parent)
        name = f"{parent}/nodes/{node_id}"
        if name in self.nodes:
            # REF/projects.locations.nodes/create: the id is the node's; a second create
            # of it is ALREADY_EXISTS (HTTP 409)
            raise HttpFault("ALREADY_EXISTS", f"Resource '{name}' already exists")
        # REF/projects.locations.nodes#Node: output-only fields the service fills in
        node = {**body, "name": name, "state": "CREATING", "health": "HEALTH_UNSPECIFIED",
                "createTime": self._stamp(), "id": str(next(self._ids)), "apiVersion": "V2"}
        if qr:
            node["queuedResource"] = qr
        self.nodes[name] = node
        op = self._op(parent, "create", name)
        self._due[name] = self.now + self.faults.create_s
        self._op_of[name] = op["name"]
        if qr is None and self.faults.stockouts:
            self.faults.stockouts -= 1
            self._stockout_op.add(op["name"])
        return op

    def _admit_create(self, parent: str) -> None:
        self.count.create_calls += 1
        if self.faults.permission_denied:
            raise HttpFault("PERMISSION_DENIED",
                            "Permission 'tpu.nodes.create' denied on resource (or it may not exist).")
        if self.faults.quota_errors:
            self.faults.quota_errors -= 1
            raise HttpFault("RESOURCE_EXHAUSTED", QUOTA.format(zone=parent.rsplit("/", 1)[-1]))

    def _delete_node(self, name: str) -> dict[str, Any]:
        node = self.nodes.get(name)
        if node is None:
            raise HttpFault("NOT_FOUND", f"Resource '{name}' was not found")
        if node["state"] != "DELETING":
            if node["state"] == "READY":
                self.on_gone(node)
            node["state"] = "DELETING"
            self._due[name] = self.now + self.faults.delete_s
            self._op_of[name] = self._op(name.rsplit("/nodes/", 1)[0], "delete", name)["name"]
        return self.ops[self._op_of[name]]

    # ---- queued resources ----------------------------------------------------------------
    def _create_qr(self, parent: str, qr_id: str, request_id: str,
                   body: dict[str, Any]) -> dict[str, Any]:
        if request_id and request_id in self._requests:
            # REF/projects.locations.queuedResources/create: requestId "Idempotent request
            # UUID": the same request again is the same operation
            return self.ops[self._requests[request_id]]
        self._admit_create(parent)
        name = f"{parent}/queuedResources/{qr_id}"
        if name in self.queued:
            raise HttpFault("ALREADY_EXISTS", f"Resource '{name}' already exists")
        # REF/projects.locations.queuedResources#QueuedResource; state per
        # REF/...#QueuedResourceState ({"state": ..., "<state>Data": {}})
        self.queued[name] = {**body, "name": name, "createTime": self._stamp(),
                             "state": {"state": "ACCEPTED", "acceptedData": {},
                                       "stateInitiator": "USER"}}
        self._due[name] = self.now + 1.0
        op = self._op(parent, "create", name)
        self._finish(op, response=self.queued[name], kind="QueuedResource")
        if request_id:
            self._requests[request_id] = op["name"]
        return op

    def _delete_qr(self, name: str, force: bool) -> dict[str, Any]:
        qr = self.queued.get(name)
        if qr is None:
            raise HttpFault("NOT_FOUND", f"Resource '{name}' was not found")
        mine = [n for n, node in self.nodes.items() if node.get("queuedResource") == name]
        if mine and not force:
            # REF/projects.locations.queuedResources/delete: force "If set to true, all
            # running nodes belonging to this queued resource will be deleted first"
            raise HttpFault("FAILED_PRECONDITION",
                            "Queued resource has nodes: delete them first or set force")
        for n in mine:
            self._delete_node(n)
        if qr["state"]["state"] != "DELETING":
            self._set_qr(name, "DELETING", "deletingData", {})
            self._due[name] = self.now + self.faults.delete_s
            self._op_of[name] = self._op(name.rsplit("/queuedResources/", 1)[0], "delete",
                                         name)["name"]
        return self.ops[self._op_of[name]]

    def _set_qr(self, name: str, state: str, key: str, data: dict[str, Any]) -> None:
        self.queued[name]["state"] = {"state": state, key: data, "stateInitiator": "SERVICE"}

    # ---- time ------------------------------------------------------------------------------
    def settle(self) -> None:
        """Apply every step that is due by `now`."""
        if self.clock is not None:
            self.now = self.clock()
        for node_id, at in list(self.faults.preempt_at.items()):
            if at <= self.now and self.preempt(node_id):
                del self.faults.preempt_at[node_id]
        for name, at in sorted(self._due.items(), key=lambda kv: kv[1]):
            if at <= self.now:
                del self._due[name]
                if name in self.nodes:
                    self._node_step(name)
                elif name in self.queued:
                    self._qr_step(name)

    def _node_step(self, name: str) -> None:
        node = self.nodes[name]
        op = self.ops.get(self._op_of.get(name, ""))
        if node["state"] == "DELETING":
            del self.nodes[name]
            if op is not None:
                self._finish(op, response=None)
        elif node["state"] == "CREATING" and op is not None and op["name"] in self._stockout_op:
            # the stockout: the operation fails and the node is gone
            self._stockout_op.discard(op["name"])
            zone = name.split("/")[3]
            self._finish(op, error={"code": 8, "message": STOCKOUT.format(zone=zone)})
            del self.nodes[name]
        elif node["state"] == "CREATING":
            node["state"], node["health"] = "READY", "HEALTHY"
            self.count.creates[name.rsplit("/", 1)[-1]] = \
                self.count.creates.get(name.rsplit("/", 1)[-1], 0) + 1
            if op is not None:
                self._finish(op, response=dict(node))
            self.on_ready(node)

    def _qr_step(self, name: str) -> None:
        qr = self.queued[name]
        state = qr["state"]["state"]
        if state == "DELETING":
            del self.queued[name]
            op = self.ops.get(self._op_of.get(name, ""))
            if op is not None:
                self._finish(op, response=None)
        elif state in ("ACCEPTED", "WAITING_FOR_RESOURCES"):
            if self.faults.stockouts:  # no capacity: it waits in the queue, not fails
                self.faults.stockouts -= 1
                self._set_qr(name, "WAITING_FOR_RESOURCES", "waitingForResourcesData", {})
                self._due[name] = self.now + 1.0
                return
            self._set_qr(name, "PROVISIONING", "provisioningData", {})
            spec = qr["tpu"]["nodeSpec"][0]
            self._create_node(spec["parent"], spec["nodeId"], spec["node"], qr=name)
            self._due[name] = self.now + self.faults.create_s
        elif state == "PROVISIONING":
            self._set_qr(name, "ACTIVE", "activeData", {})

    # ---- operations (REF/projects.locations.operations#Operation) --------------------------
    def _op(self, parent: str, verb: str, target: str) -> dict[str, Any]:
        name = f"{parent}/operations/operation-{next(self._ids)}"
        op: dict[str, Any] = {
            "name": name, "done": False,
            # REF/OperationMetadata
            "metadata": {"@type": "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata",
                         "createTime": self._stamp(), "target": target, "verb": verb,
                         "apiVersion": "v2"}}
        self.ops[name] = op
        return op

    def _finish(self, op: dict[str, Any], *, response: dict[str, Any] | None = None,
                error: dict[str, Any] | None = None, kind: str = "Node") -> None:
        op["done"] = True
        if error is not None:
            op["error"] = error
        elif response is not None:
            op["response"] = {"@type": f"type.googleapis.com/google.cloud.tpu.v2.{kind}",
                              **response}
        else:  # REF Operation: a done operation has an error or a response; a delete's
            # response is google.protobuf.Empty
            op["response"] = {"@type": "type.googleapis.com/google.protobuf.Empty"}

    def _stamp(self) -> str:
        return datetime.fromtimestamp(self.now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def _node_named(self, node_id: str) -> str | None:
        return next((n for n in self.nodes if n.endswith(f"/nodes/{node_id}")), None)

