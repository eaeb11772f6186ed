"""The real adapter's choices that need no server: where it may talk plain HTTP, and how
a refused call is classified (REST raises by HTTP status)."""

from __future__ import annotations

import pytest

from tpuq.fleet.gcp import _said, is_loopback_http, make_client
from tpuq.fleet.port import ErrorKind, kind_of_http, kind_of_rpc


def test_plain_http_only_on_loopback() -> None:
    assert is_loopback_http("http://127.0.0.1:8080")
    assert not is_loopback_http("http://10.0.0.1:8080")
    with pytest.raises(ValueError, match="plain http only on loopback"):
        make_client("http://10.0.0.1:8080")
    make_client("http://127.0.0.1:9")  # anonymous: no credentials looked up


@pytest.mark.parametrize("status, message, kind", [
    (429, "Quota limit 'TPUV4PodPerProjectPerZoneForTPUAPI' has been exceeded.", ErrorKind.QUOTA),
    (429, 'There is no more capacity in the zone "us-central2-b"', ErrorKind.STOCKOUT),
    (403, "Permission 'tpu.nodes.create' denied", ErrorKind.PERMISSION),
    (400, "Invalid runtime version", ErrorKind.INVALID),
    (404, "not found", ErrorKind.NOT_FOUND),
    (409, "already exists", ErrorKind.EXISTS),
    (503, "unavailable", ErrorKind.TRANSIENT),
])
def test_http_refusals_are_told_apart(status: int, message: str, kind: ErrorKind) -> None:
    assert kind_of_http(status, message) is kind


def test_failed_operations_are_told_apart() -> None:
    assert kind_of_rpc(8, "There is no more capacity in the zone") is ErrorKind.STOCKOUT
    assert kind_of_rpc(8, "Insufficient reserved capacity.") is ErrorKind.STOCKOUT
    assert kind_of_rpc(8, "Quota 'X' exhausted") is ErrorKind.QUOTA
    assert kind_of_rpc(7, "denied") is ErrorKind.PERMISSION
    assert kind_of_rpc(3, "bad") is ErrorKind.INVALID
    assert kind_of_rpc(13, "internal") is ErrorKind.TRANSIENT


def test_the_apis_own_words_without_the_request_line() -> None:
    assert _said("POST http://x/v2/nodes?nodeId=a: Quota limit") == "Quota limit"
    assert _said("plain words: kept") == "plain words: kept"
