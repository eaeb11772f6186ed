"""`tpuq web token`: issued once, listed without the secret, revoked for good."""

from __future__ import annotations

import json


def test_issue_list_and_revoke_a_sign_in_token(stack):  # type: ignore[no-untyped-def]
    out = stack.tpuq("web", "token", "add", "alice", "--label", "laptop", "--days", "30").stdout
    token = out.split()[-1]
    assert token.startswith("tpuq_") and len(token) > 40
    (row,) = json.loads(stack.tpuq("web", "token", "list", "--json").stdout)
    assert row["user"] == "alice" and row["label"] == "laptop" and row["revoked_at"] is None
    assert token not in stack.tpuq("web", "token", "list").stdout  # shown once, never again
    assert abs(row["expires_at"] - row["created_at"] - 30 * 86400) < 1
    stack.tpuq("web", "token", "revoke", str(row["id"]))
    (row,) = json.loads(stack.tpuq("web", "token", "list", "--json").stdout)
    assert row["revoked_at"] is not None
    again = stack.tpuq("web", "token", "revoke", str(row["id"]), check=False)
    assert again.returncode == 2 and "no live token" in again.stderr
    assert "Traceback" not in again.stderr
