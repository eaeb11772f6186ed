"""The real adapter: the Cloud TPU API v2 through google-cloud-tpu, REST transport.

REST so that the endpoint can be anything (`TPUQ_TPU_API_ENDPOINT`; the tests' fake API
on loopback). Credentials are Application Default Credentials, anonymous for a plain
HTTP endpoint on loopback (a fake: nothing to authenticate to). The client's own retries
are off: the controller backs off per slot and says so. Imported only by the fleet
controller, and google's packages only when it makes a client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from tpuq.fleet.port import (
    ApiError,
    CreateRequest,
    ErrorKind,
    NodeView,
    OpView,
    QueuedView,
    kind_of_http,
)

CALL_TIMEOUT_S = 30.0
DEFAULT_ENDPOINT = "https://tpu.googleapis.com"


def is_loopback_http(endpoint: str) -> bool:
    u = urlsplit(endpoint)
    return u.scheme == "http" and (u.hostname or "") in ("127.0.0.1", "localhost", "::1")


def make_client(endpoint: str) -> Any:
    """A TpuClient (v2, REST) for `endpoint` ("" = Google's)."""
    from google.cloud import tpu_v2

    endpoint = endpoint or DEFAULT_ENDPOINT
    if urlsplit(endpoint).scheme == "http" and not is_loopback_http(endpoint):
        raise ValueError(f"TPUQ_TPU_API_ENDPOINT {endpoint}: plain http only on loopback "
                         "(a test's fake API); use https")
    creds = None
    if is_loopback_http(endpoint):
        from google.auth.credentials import AnonymousCredentials

        creds = AnonymousCredentials()  # type: ignore[no-untyped-call]
    return tpu_v2.TpuClient(transport="rest", credentials=creds,
                            client_options={"api_endpoint": endpoint})


class GoogleTpuApi:
    """TpuApi over a google-cloud-tpu client (make_client)."""

    def __init__(self, client: Any, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.client = client
        self.timeout = timeout_s

    def _call(self, fn: Any, request: Any) -> Any:
        from google.api_core import exceptions as gexc

        try:
            return fn(request=request, timeout=self.timeout, retry=None)
        except gexc.GoogleAPICallError as e:
            status = int(e.code) if isinstance(e.code, int) else 500
            message = _said(e.message or "")
            raise ApiError(kind_of_http(status, message), f"HTTP {status}: {message}") from None
        except (OSError, ValueError) as e:  # requests' ConnectionError/Timeout are OSErrors
            raise ApiError(ErrorKind.TRANSIENT, f"{type(e).__name__}: {e}") from None

    def list_nodes(self, project: str, zone: str) -> Sequence[NodeView]:
        parent = f"projects/{project}/locations/{zone}"
        pager = self._call(self.client.list_nodes, {"parent": parent})
        try:
            return [_node_view(n) for n in pager]
        except Exception as e:  # a later page failed  # noqa: BLE001
            raise ApiError(ErrorKind.TRANSIENT, f"listing nodes: {e}") from None

    def list_queued(self, project: str, zone: str) -> Sequence[QueuedView]:
        parent = f"projects/{project}/locations/{zone}"
        pager = self._call(self.client.list_queued_resources, {"parent": parent})
        try:
            return [_queued_view(q) for q in pager]
        except Exception as e:  # noqa: BLE001
            raise ApiError(ErrorKind.TRANSIENT, f"listing queued resources: {e}") from None

    def create(self, req: CreateRequest) -> str:
        from google.cloud import tpu_v2

        spec = req.spec
        parent = f"projects/{spec.project}/locations/{spec.zone}"
        node = _node(req)
        if not spec.queued:
            op = self._call(self.client.create_node,
                            tpu_v2.CreateNodeRequest(parent=parent, node_id=req.node_id, node=node))
            return str(op.operation.name)
        qr = tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[
            tpu_v2.QueuedResource.Tpu.NodeSpec(parent=parent, node_id=req.node_id, node=node)]))
        if spec.capacity == "spot":
            qr.spot = tpu_v2.QueuedResource.Spot()
        if spec.reservation:
            qr.reservation_name = spec.reservation
        if spec.valid_for_s:
            from google.protobuf import duration_pb2

            qr.queueing_policy = tpu_v2.QueuedResource.QueueingPolicy(
                valid_until_duration=duration_pb2.Duration(seconds=int(spec.valid_for_s)))
        op = self._call(self.client.create_queued_resource, tpu_v2.CreateQueuedResourceRequest(
            parent=parent, queued_resource_id=req.node_id, queued_resource=qr,
            request_id=req.request_id))
        return str(op.operation.name)

    def delete_node(self, project: str, zone: str, node_id: str) -> str | None:
        name = f"projects/{project}/locations/{zone}/nodes/{node_id}"
        return self._delete(self.client.delete_node, {"name": name})

    def delete_queued(self, project: str, zone: str, qr_id: str, request_id: str) -> str | None:
        name = f"projects/{project}/locations/{zone}/queuedResources/{qr_id}"
        return self._delete(self.client.delete_queued_resource,
                            {"name": name, "force": True, "request_id": request_id})

    def _delete(self, fn: Any, request: dict[str, Any]) -> str | None:
        try:
            op = self._call(fn, request)
        except ApiError as e:
            if e.api_kind is ErrorKind.NOT_FOUND:
                return None
            raise
        return str(op.operation.name)

    def operation(self, name: str) -> OpView:
        from google.longrunning import operations_pb2

        op = self._call(self.client.get_operation, operations_pb2.GetOperationRequest(name=name))
        if op.done and op.HasField("error"):
            return OpView(name, True, int(op.error.code), str(op.error.message))
        return OpView(name, bool(op.done))


def _node(req: CreateRequest) -> Any:
    from google.cloud import tpu_v2

    spec = req.spec
    node = tpu_v2.Node(accelerator_type=spec.accelerator_type,
                       runtime_version=spec.runtime_version,
                       labels=dict(req.labels), metadata=dict(req.metadata),
                       description=f"tpuq fleet slot {spec.name}")
    if spec.network or spec.subnetwork:
        node.network_config = tpu_v2.NetworkConfig(
            network=spec.network, subnetwork=spec.subnetwork, enable_external_ips=True)
    if spec.capacity == "spot":
        node.scheduling_config = tpu_v2.SchedulingConfig(spot=True)
    elif spec.capacity == "reserved":
        node.scheduling_config = tpu_v2.SchedulingConfig(reserved=True)
    return node


def _said(message: str) -> str:
    """The API's own words: api_core puts "METHOD url: " before them over REST."""
    head, sep, rest = message.partition(": ")
    return rest if sep and head.split(" ", 1)[0] in ("GET", "POST", "DELETE", "PATCH") else message


def _last(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _node_view(n: Any) -> NodeView:
    return NodeView(name=_last(n.name), state=n.state.name, health=n.health.name,
                    labels=dict(n.labels), queued_resource=_last(n.queued_resource or ""))


def _queued_view(q: Any) -> QueuedView:
    specs = list(q.tpu.node_spec)
    labels = dict(specs[0].node.labels) if specs else {}
    err = q.state.failed_data.error if q.state.state.name == "FAILED" else None
    return QueuedView(name=_last(q.name), state=q.state.state.name, labels=labels,
                      error_code=int(err.code) if err is not None and err.code else None,
                      error=str(err.message) if err is not None else "")
