"""Log shipping to Redis streams: caps, expiry, and a Redis outage (fakeredis here; the
team end-to-end tests ship through a real redis-server)."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from itertools import islice
from typing import Any

import fakeredis
import pytest

from tpuq.queue import logstream
from tpuq.queue.logstream import LogShipper, Piece, follow

OWNER = "alice"
STREAM = logstream.key(OWNER, 7, 1)


class FakeRedisServer:
    """A Redis without persistence that can be stopped and started again."""

    url = "redis://fake/0"

    def __init__(self) -> None:
        self.server = fakeredis.FakeServer()

    def client(self, url: str) -> Any:
        return fakeredis.FakeRedis(server=self.server)

    def stop(self) -> None:
        fakeredis.FakeRedis(server=self.server).flushall()  # nothing kept on disk
        self.server.connected = False

    def start(self) -> None:
        self.server.connected = True


@pytest.fixture
def redis_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRedisServer]:
    server = FakeRedisServer()
    monkeypatch.setattr(logstream, "client", server.client)
    yield server


def pieces(url: str) -> list[Piece | None]:
    """What `tpuq logs -f` reads: ends at the end marker (a None means still waiting)."""
    return list(islice(follow(url, STREAM, wait=True, block_ms=100), 5))


def shipped(url: str) -> list[bytes | None]:
    return [p.data for p in pieces(url) if p is not None and not p.end]


def test_output_of_an_attempt_that_ended_while_redis_was_down_arrives_after(
        redis_server, tmp_path):
    log = tmp_path / "1.log"
    log.write_bytes(b"first\n")
    shipper = LogShipper(redis_server.url)
    shipper.ship(OWNER, 7, 1, str(log))
    assert shipped(redis_server.url)[0] == b"first\n"
    redis_server.stop()  # this test's Redis keeps nothing on disk: "first" is gone with it
    log.write_bytes(b"first\nsecond\n")
    shipper.ship(OWNER, 7, 1, str(log), final=True)  # the attempt ends during the outage
    redis_server.start()
    shipper.ship_unfinished()
    assert pieces(redis_server.url) == [Piece(b"second\n", offset=6), Piece(b"", end=True)], \
        "the rest, where it starts in the file (the reader can tell 6 bytes are gone), the end"
    shipper.ship_unfinished()  # nothing is owed any more: no second copy
    assert shipped(redis_server.url) == [b"second\n"]


def test_a_chatty_attempt_keeps_only_its_newest_bytes_in_redis(redis_server, tmp_path,
                                                                monkeypatch):
    """Redis keeps at most MAX_BYTES of an attempt (the doorbell must not run out of memory
    for one chatty job), and what it keeps says where in the file it starts."""
    monkeypatch.setattr(logstream, "MAX_BYTES", 1000)
    monkeypatch.setattr(logstream, "CHUNK", 100)
    log = tmp_path / "1.log"
    shipper = LogShipper(redis_server.url)

    def kept() -> tuple[int | None, bytes]:
        got = [p for p in follow(redis_server.url, STREAM, wait=False) if p is not None]
        return got[0].offset, b"".join(p.data for p in got)

    log.write_bytes(b"a" * 300)
    shipper.ship(OWNER, 7, 1, str(log))
    assert kept() == (0, b"a" * 300)
    with open(log, "ab") as f:
        f.write(b"b" * 900)
    shipper.ship(OWNER, 7, 1, str(log))  # 1200 bytes shipped, the oldest 200 trimmed
    assert kept() == (200, log.read_bytes()[200:])
    with open(log, "ab") as f:
        f.write(b"c" * 5000)
    shipper.ship(OWNER, 7, 1, str(log))  # a burst over the cap: only its newest 1000 bytes go
    assert kept() == (5200, b"c" * 1000)
    assert shipper.redis.xlen(STREAM) == 10


def test_a_stream_expires_even_if_its_end_never_comes(redis_server, tmp_path):
    """A dead host never ships an end marker: its streams must expire all the same."""
    log = tmp_path / "1.log"
    log.write_bytes(b"partial\n")
    shipper = LogShipper(redis_server.url)
    shipper.ship(OWNER, 7, 1, str(log))
    ttl = shipper.redis.ttl(STREAM)
    assert 0 < ttl <= logstream.TTL_S


def test_a_late_tick_after_the_end_ships_nothing_again(redis_server, tmp_path):
    """A shipping tick that saw the attempt running before it ended must not ship its
    whole file a second time after the end marker."""
    log = tmp_path / "1.log"
    log.write_bytes(b"all of it\n")
    shipper = LogShipper(redis_server.url)
    shipper.ship(OWNER, 7, 1, str(log), final=True)
    shipper.ship(OWNER, 7, 1, str(log))  # the late tick
    assert shipper.redis.xlen(STREAM) == 2, "one piece and the end marker"


def test_every_worker_of_a_slice_job_has_a_stream_of_its_own(redis_server, tmp_path):
    """Worker 0's output is the job's stream; worker N's is beside it, ended on its own."""
    shipper = LogShipper(redis_server.url)
    for w in range(3):
        log = tmp_path / f"1.w{w}.log"
        log.write_bytes(f"worker {w}\n".encode())
        shipper.ship(OWNER, 7, 1, str(log), final=w != 1, worker=w)
    read = {w: logstream.read_after(redis_server.url, logstream.key(OWNER, 7, 1, w), "0-0",
                                    1 << 20) for w in range(3)}
    assert {w: ([p.data for _, p in entries], ended) for w, (entries, ended) in read.items()} \
        == {0: ([b"worker 0\n"], True), 1: ([b"worker 1\n"], False), 2: ([b"worker 2\n"], True)}
    assert logstream.key(OWNER, 7, 1, 0) == logstream.key(OWNER, 7, 1) \
        != logstream.key(OWNER, 7, 1, 2)


def test_an_owners_streams_are_named_so_no_other_owners_pattern_matches():
    """A user's broker account reads `tpuq:logs:<owner>:*`: a name with a ':' or a glob
    character must not make another owner's streams match it."""
    assert logstream.key("alice", 7, 1) == "tpuq:logs:alice:7:1"
    assert logstream.key("alice", 7, 1, 2) == "tpuq:logs:alice:7:1:w2"
    assert logstream.pattern("alice") == "tpuq:logs:alice:*"
    for odd in ("alice:x", "al*", "a?c", "[a]", "a\\b", "j.doe-1", ""):
        assert not fnmatch.fnmatchcase(logstream.key(odd, 7, 1), "tpuq:logs:alice:*")
        assert fnmatch.fnmatchcase(logstream.key(odd, 7, 1), logstream.pattern(odd))
    assert logstream.key("j.doe-1", 7, 1) == "tpuq:logs:j.doe-1:7:1"
