"""The controller's view of the Cloud TPU API: a port with plain values, two adapters.

`gcp.py` is the real one (google-cloud-tpu, REST); the tests' fake server is reached
through it too. Errors come as ApiError with a kind the controller acts on; the
classification is here, in one place, from HTTP status (REST raises by status) and the
google.rpc code of a failed operation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from tpuq.errors import Failure, TpuqError
from tpuq.fleet.spec import SlotSpec


class ErrorKind(str, Enum):
    STOCKOUT = "stockout"  # no capacity in the zone: wait and try again
    QUOTA = "quota"  # the project's quota is used up: wait (someone may raise it)
    PERMISSION = "permission"  # the controller's account may not: a person must act
    INVALID = "invalid"  # the request is wrong (type, version, network): fix the file
    NOT_FOUND = "not_found"
    EXISTS = "exists"  # the id is taken: the create happened before
    TRANSIENT = "transient"  # 5xx, a timeout, a dropped connection: try again soon

    def __str__(self) -> str:
        return self.value


class ApiError(TpuqError):
    """A TPU API call that failed; `api_kind` says how the controller reacts."""

    KIND = Failure.UNAVAILABLE

    def __init__(self, api_kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.api_kind = api_kind
        self.message = message


@dataclass(frozen=True)
class NodeView:
    name: str  # the node id (last part of its resource name)
    state: str  # Node.State's name
    health: str = "HEALTH_UNSPECIFIED"
    labels: Mapping[str, str] = field(default_factory=dict)
    queued_resource: str = ""  # the id of the queued resource that made it, if any


@dataclass(frozen=True)
class QueuedView:
    name: str  # the queued resource id
    state: str  # QueuedResourceState.State's name
    labels: Mapping[str, str] = field(default_factory=dict)  # its node spec's labels
    error_code: int | None = None  # failed_data.error (a google.rpc.Status) when FAILED
    error: str = ""


@dataclass(frozen=True)
class OpView:
    name: str
    done: bool
    error_code: int | None = None  # google.rpc.Code
    error_message: str = ""


@dataclass(frozen=True)
class CreateRequest:
    """A node or queued resource to make for one generation of a slot's VM."""

    spec: SlotSpec
    node_id: str
    labels: Mapping[str, str]
    metadata: Mapping[str, str]
    request_id: str  # queued-resource calls take one; a node create takes none


class TpuApi(Protocol):
    def list_nodes(self, project: str, zone: str) -> Sequence[NodeView]: ...

    def list_queued(self, project: str, zone: str) -> Sequence[QueuedView]: ...

    def create(self, req: CreateRequest) -> str:
        """Start making the node or queued resource; the operation's name."""
        ...

    def delete_node(self, project: str, zone: str, node_id: str) -> str | None:
        """Start deleting; the operation's name, None when there is nothing to delete."""
        ...

    def delete_queued(self, project: str, zone: str, qr_id: str, request_id: str) -> str | None:
        """Force-delete a queued resource with its nodes; None when it is gone."""
        ...

    def operation(self, name: str) -> OpView: ...


# google.rpc.Code numbers (googleapis google/rpc/code.proto)
RPC_INVALID_ARGUMENT, RPC_NOT_FOUND, RPC_ALREADY_EXISTS = 3, 5, 6
RPC_PERMISSION_DENIED, RPC_RESOURCE_EXHAUSTED, RPC_FAILED_PRECONDITION = 7, 8, 9
RPC_UNAUTHENTICATED, RPC_OUT_OF_RANGE = 16, 11


def kind_of_http(status: int, message: str) -> ErrorKind:
    """How a call refused over REST: by HTTP status (google.api_core raises by it). A 429
    is a quota unless its words say the zone has no capacity."""
    if status == 429:
        return ErrorKind.STOCKOUT if _says_stockout(message) else ErrorKind.QUOTA
    if status in (401, 403):
        return ErrorKind.PERMISSION
    if status == 404:
        return ErrorKind.NOT_FOUND
    if status == 409:
        return ErrorKind.EXISTS
    if status == 400:
        return ErrorKind.INVALID
    return ErrorKind.TRANSIENT


def kind_of_rpc(code: int, message: str) -> ErrorKind:
    """How a failed operation (or queued resource) failed, by its google.rpc code. A
    RESOURCE_EXHAUSTED is a stockout unless its words name a quota."""
    if code == RPC_RESOURCE_EXHAUSTED:
        return ErrorKind.QUOTA if "quota" in message.lower() else ErrorKind.STOCKOUT
    if code in (RPC_PERMISSION_DENIED, RPC_UNAUTHENTICATED):
        return ErrorKind.PERMISSION
    if code in (RPC_INVALID_ARGUMENT, RPC_FAILED_PRECONDITION, RPC_OUT_OF_RANGE):
        return ErrorKind.INVALID
    if code == RPC_ALREADY_EXISTS:
        return ErrorKind.EXISTS
    if code == RPC_NOT_FOUND:
        return ErrorKind.NOT_FOUND
    return ErrorKind.TRANSIENT


def _says_stockout(message: str) -> bool:
    m = message.lower()
    return "no more capacity" in m or "insufficient capacity" in m or "stockout" in m \
        or "insufficient reserved capacity" in m
