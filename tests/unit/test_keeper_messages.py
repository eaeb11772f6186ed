"""What an agent and a keeper say to each other: every message survives its encoding, and
a message of another version is read as that version says, or refused."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tpuq.agent.attempts.outcome import ending_of, read_exit
from tpuq.agent.keeper import messages
from tpuq.agent.keeper.messages import (
    KINDS,
    VERSION,
    Collected,
    Ended,
    Kill,
    Launch,
    Lease,
    Message,
    MessageError,
    Refused,
    Say,
    Started,
    Status,
    Stop,
    UnknownVersion,
    decode,
    decode_as,
    encode,
    from_keeper,
    to_keeper,
)
from tpuq.state.states import Outcome

ENDED = Ended(code=3, signal=None, fenced=False, signalled=True, dropped=12, keeper_pid=41,
              ended_wall=1.5e9, instance="db-1", job_id=7, attempt=2)
SAMPLES: dict[type, Message] = {
    Launch: Launch(job_id=7, attempt=2, host="h", argv=["python", "-c", "pass"],
                   env={"PATH": "/bin"}, cwd="/tmp", log_path="/l/7.2.log",
                   exit_path="/l/7.2.log.exit", run_dir="/run", lease_until=100.5, lease_s=30,
                   grace_s=5.0, log_max_bytes=10**6, user=1000, group=1000, groups=[27],
                   chip_locks=["/locks/chip0.lock"], instance="db-1", output=None, tty=True),
    Lease: Lease(until=12.25),
    Stop: Stop(signal="SIGUSR1", grace=2.5),
    Kill: Kill(),
    Collected: Collected(),
    Say: Say(text="tpuq: this session stops now"),
    Started: Started(pid=123, keeper_pid=41, start_ticks=9876),
    Ended: ENDED,
    Status: Status(job_id=7, attempt=2, keeper_pid=41, pid=123, start_ticks=9876, ended=ENDED),
    Refused: Refused("bad launch request: no argv"),
}


def test_every_kind_has_a_sample() -> None:
    assert set(SAMPLES) == set(KINDS)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_every_message_survives_its_encoding(kind: type) -> None:
    msg = SAMPLES[kind]
    line = encode(msg)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line)["v"] == VERSION
    assert decode(line) == msg
    assert decode_as(kind, line) == msg


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_the_wire_form_is_every_field_by_name(kind: type) -> None:
    """What a keeper of another release reads: the kind, the version and each field
    (a Status's Ended as an object of its own), nothing else."""
    msg = SAMPLES[kind]
    head = {"op": msg.OP} if kind in messages.OPS.values() else {"event": msg.EVENT}
    assert json.loads(encode(msg)) == {**head, "v": VERSION, **dataclasses.asdict(msg)}


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_each_side_reads_only_what_the_other_sends(kind: type) -> None:
    line = encode(SAMPLES[kind])
    right, wrong = (to_keeper, from_keeper) if kind in messages.OPS.values() else \
        (from_keeper, to_keeper)
    assert right(line) == SAMPLES[kind]
    with pytest.raises(MessageError):
        wrong(line)


def test_a_version_0_end_is_read_with_what_it_did_not_say_unknown() -> None:
    """Before messages carried a version: no "v"; a keeper older still wrote no
    "signalled", and such an end is not taken for one the job reached untouched."""
    older = {"event": "ended", "code": 0, "signal": None, "fenced": False, "dropped": 0,
             "keeper_pid": 9, "ended_wall": 1.0, "instance": "db", "job_id": 1, "attempt": 1}
    ended = decode_as(Ended, json.dumps(older))
    assert ended.signalled is None and ended.code == 0
    assert ending_of(ended, "/nonexistent").untouched is False
    assert ending_of(Ended(code=0, signalled=False), "/nonexistent").untouched is True
    assert ending_of(Ended(code=0, signalled=True), "/nonexistent").untouched is False


def test_a_version_0_status_and_exit_file_are_read(tmp_path) -> None:
    status = decode(json.dumps({"event": "status", "job_id": 1, "attempt": 2, "keeper_pid": 3,
                                "pid": 4, "start_ticks": 5,
                                "ended": {"code": None, "signal": 9, "fenced": True}}))
    assert status == Status(job_id=1, attempt=2, keeper_pid=3, pid=4, start_ticks=5,
                            ended=Ended(signal=9, fenced=True))
    log = tmp_path / "1.2.log"
    (tmp_path / "1.2.log.exit").write_text(json.dumps({"code": 0, "signal": None,
                                                       "signalled": False, "job_id": 1}))
    assert read_exit(str(log)) == Ended(code=0, signalled=False, job_id=1)
    (tmp_path / "1.2.log.exit").write_bytes(encode(ENDED))
    assert read_exit(str(log)) == ENDED


def test_a_later_version_is_refused_not_guessed(tmp_path) -> None:
    later = {**messages.as_dict(ENDED), "v": VERSION + 1}
    with pytest.raises(UnknownVersion):
        decode(json.dumps(later))
    (tmp_path / "x.log.exit").write_text(json.dumps(later))
    assert read_exit(str(tmp_path / "x.log")) is None


@pytest.mark.parametrize("line", [
    b"not json", b"[1, 2]", b'{"v": 1}', b'{"op": "dance"}', b'{"event": "ended", "v": "1"}',
    b'{"op": "lease", "until": "soon"}', b'{"op": "lease"}', b'{"op": "say", "text": 3}',
    b'{"event": "started", "pid": true, "keeper_pid": 1}',
])
def test_what_is_no_message_is_a_message_error(line: bytes) -> None:
    with pytest.raises(MessageError):
        decode(line)


def test_a_keepers_error_reads_as_a_host_error_or_a_failure() -> None:
    assert ending_of(Ended(error="chip busy", host_error=True), "/x").outcome is Outcome.HOST_ERROR
    assert ending_of(Ended(error="could not start"), "/x").outcome is Outcome.FAILED
    assert ending_of(Ended(signal=9, fenced=True), "/x").outcome is Outcome.LOST
