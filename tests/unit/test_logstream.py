"""Log shipping to Redis streams survives a Redis outage (a real redis-server, stopped
and started again on the same port)."""

from __future__ import annotations

from itertools import islice

from tpuq.queue.logstream import LogShipper, follow


def shipped(url: str) -> list[bytes | None]:
    """What `tpuq logs -f` reads: ends at the end marker (a None means still waiting)."""
    return list(islice(follow(url, 7, 1, wait=True, block_ms=100), 5))


def test_output_of_an_attempt_that_ended_while_redis_was_down_arrives_after(
        redis_server, tmp_path):
    log = tmp_path / "1.log"
    log.write_bytes(b"first\n")
    shipper = LogShipper(redis_server.url)
    shipper.ship(7, 1, str(log))
    assert shipped(redis_server.url)[0] == b"first\n"
    redis_server.stop()  # this test's Redis keeps nothing on disk: "first" is gone with it
    log.write_bytes(b"first\nsecond\n")
    shipper.ship(7, 1, str(log), final=True)  # the attempt ends during the outage
    redis_server.start()
    shipper.ship_unfinished()
    assert shipped(redis_server.url) == [b"second\n"], "the rest and the end marker"
    shipper.ship_unfinished()  # nothing is owed any more: no second copy
    assert shipped(redis_server.url) == [b"second\n"]
