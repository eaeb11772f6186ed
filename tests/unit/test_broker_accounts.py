"""Users' broker accounts (tpuq/queue/accounts.py) on a real redis-server: made as the
database has them, a new password taken, a removed user removed, an admin's own account
left alone, and each account reads its owner's streams only, read-only."""

from __future__ import annotations

import pytest
import redis

from tpuq.queue import accounts, logstream


def test_sync_makes_the_broker_agree_with_the_database(redis_server):
    admin = redis.Redis.from_url(redis_server.url)
    admin.execute_command("ACL", "SETUSER", "flower", "on", ">pw", "~*", "+@all")
    admin.xadd(logstream.key("alice", 1, 1), {"d": b"hers"})
    admin.xadd(logstream.key("bob", 2, 1), {"d": b"his"})
    wanted = {"alice": accounts.password_hash("a1"), "bob": accounts.password_hash("b1")}
    assert accounts.sync(admin, wanted) == (["alice", "bob"], [])
    assert accounts.sync(admin, wanted) == ([], []), "nothing to change the second time"

    alice = redis.Redis.from_url(accounts.user_url(redis_server.url, "alice", "a1"))
    assert alice.xrange(logstream.key("alice", 1, 1))[0][1] == {b"d": b"hers"}
    with pytest.raises(redis.exceptions.NoPermissionError):
        alice.xrange(logstream.key("bob", 2, 1))
    with pytest.raises(redis.exceptions.NoPermissionError):
        alice.xadd(logstream.key("alice", 1, 1), {"d": b"x"})

    wanted["alice"] = accounts.password_hash("a2")  # a new password
    del wanted["bob"]  # a user removed
    assert accounts.sync(admin, wanted) == (["alice"], ["bob"])
    with pytest.raises(redis.exceptions.AuthenticationError):
        alice.close()
        redis.Redis.from_url(accounts.user_url(redis_server.url, "alice", "a1")).ping()
    users = {u.decode() for u in admin.execute_command("ACL", "USERS")}
    assert users == {"default", "alice", "flower"}, "an admin's own account is not ours"


def test_a_users_url_is_the_deployments_with_their_account():
    assert accounts.user_url("redis://:secret@redis.internal:6380/2", "alice", "p@ss") == \
        "redis://alice:p%40ss@redis.internal:6380/2"
    assert accounts.user_url("redis://[::1]/0", "bob", "x") == "redis://bob:x@[::1]/0"


def test_an_open_broker_is_told_apart_from_a_guarded_one(redis_server, tmp_path):
    from tests.services import RedisServer

    assert accounts.open_to_anyone(redis_server.url)
    guarded = RedisServer(tmp_path / "guarded", password="s3cret").start()
    try:
        assert not accounts.open_to_anyone(guarded.url)
    finally:
        guarded.stop()
