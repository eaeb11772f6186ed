"""MaintenanceWatcher and the fake metadata server it is tested against."""

from __future__ import annotations

import json
import logging
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.metadata_server import NO_NOTIFICATIONS_BODY, FakeMetadata, Reply, etag_of
from tpuq.agent.gce.metadata import (
    MaintenanceWatcher,
    Notice,
    NoticeKind,
    Source,
    Unreadable,
    read_topology,
    upcoming_notice,
)

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 10.0  # generous upper bound; the happy path is milliseconds


class Notices:
    """Collects on_change calls; tests wait on the queue instead of sleeping."""

    def __init__(self) -> None:
        self.q: queue.Queue[tuple[Source, Notice | None]] = queue.Queue()

    def __call__(self, source: Source, notice: Notice | None) -> None:
        self.q.put((source, notice))

    def next_change(self, timeout: float = WAIT_S) -> tuple[Source, Notice | None]:
        return self.q.get(timeout=timeout)

    def next_notice(self, timeout: float = WAIT_S) -> Notice:
        source, notice = self.next_change(timeout)
        assert notice is not None, f"{source} was cleared, not announced"
        assert notice.source is source
        return notice

    def next(self, timeout: float = WAIT_S) -> str:
        """The next change in words: the notice as recorded on hosts and attempts, or
        "<source> over"."""
        source, notice = self.next_change(timeout)
        return f"{source} over" if notice is None else str(notice)


@pytest.fixture
def md() -> Iterator[FakeMetadata]:
    with FakeMetadata() as server:
        yield server


@pytest.fixture
def watch(md: FakeMetadata) -> Iterator[tuple[MaintenanceWatcher, Notices]]:
    notices = Notices()
    watcher = MaintenanceWatcher(md.url, notices, timeout_s=30, interval_s=0.05)
    watcher.start()
    try:
        yield watcher, notices
    finally:
        watcher.stop()


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str | None]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=WAIT_S) as resp:
            return resp.status, resp.read().decode(), resp.headers.get("ETag")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), None


GOOGLE = {"Metadata-Flavor": "Google"}


def test_maintenance_event_and_its_end_are_reported_by_hanging_gets(
    md: FakeMetadata, watch: tuple[MaintenanceWatcher, Notices]
) -> None:
    _, notices = watch
    _wait_for_hanging_get(md)
    md.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    assert notices.next() == "maintenance-event TERMINATE_ON_HOST_MAINTENANCE"
    md.set("instance/maintenance-event", "NONE")
    assert notices.next() == "maintenance-event over"
    seen = f"last_etag={etag_of('TERMINATE_ON_HOST_MAINTENANCE')}"
    assert any("wait_for_change" in p and seen in p for p in md.requests), \
        "the end was seen by a hanging GET"


def test_migration_has_distinct_prefix(
    md: FakeMetadata, watch: tuple[MaintenanceWatcher, Notices]
) -> None:
    _, notices = watch
    md.set("instance/maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
    notice = notices.next_notice()
    assert notice.kind is NoticeKind.MIGRATION and "MIGRATE_ON_HOST_MAINTENANCE" in str(notice)
    md.set("instance/maintenance-event", "NONE")
    assert notices.next() == "maintenance-event over"
    md.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    assert notices.next_notice().kind is NoticeKind.MAINTENANCE


def test_preempted_triggers_once(md: FakeMetadata, watch: tuple[MaintenanceWatcher, Notices]) -> None:
    _, notices = watch
    md.set("instance/preempted", "TRUE")
    assert notices.next() == "instance preempted"
    # Still TRUE on later polls: no second notice; a new event is reported, not a repeat.
    md.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    assert notices.next() == "maintenance-event TERMINATE_ON_HOST_MAINTENANCE"
    assert notices.q.empty()


def test_upcoming_maintenance(md: FakeMetadata, watch: tuple[MaintenanceWatcher, Notices]) -> None:
    _, notices = watch
    info = {"windowStartTime": "2030-01-01T00:00:00Z", "maintenanceType": "SCHEDULED",
            "maintenanceStatus": "PENDING"}
    md.set("instance/upcoming-maintenance", info)
    notice = notices.next_notice()
    assert str(notice) == "upcoming maintenance SCHEDULED at 2030-01-01T00:00:00Z"
    assert notice.window_start is not None and notice.window_start.year == 2030


def test_upcoming_maintenance_moved_or_withdrawn_is_reported(
    md: FakeMetadata, watch: tuple[MaintenanceWatcher, Notices]
) -> None:
    _, notices = watch
    key = "instance/upcoming-maintenance"
    info = {"windowStartTime": "2030-01-01T00:00:00Z", "maintenanceType": "SCHEDULED",
            "maintenanceStatus": "PENDING"}
    md.set(key, info)
    assert notices.next() == "upcoming maintenance SCHEDULED at 2030-01-01T00:00:00Z"
    md.set(key, {**info, "windowStartTime": "2030-01-02T00:00:00Z"})
    assert notices.next() == "upcoming maintenance SCHEDULED at 2030-01-02T00:00:00Z"
    md.set(key, {**info, "maintenanceStatus": "ONGOING"})  # under way: acted on at once
    assert notices.next() == "maintenance SCHEDULED ongoing"
    md.set(key, None)  # nothing pending once no window is announced
    assert notices.next() == "upcoming-maintenance over"
    md.set(key, info)
    assert notices.next() == "upcoming maintenance SCHEDULED at 2030-01-01T00:00:00Z"


def test_preempted_back_to_false_is_reported(
    md: FakeMetadata, watch: tuple[MaintenanceWatcher, Notices]
) -> None:
    """The watcher reports what it sees; that preemption is terminal is the policy's word."""
    _, notices = watch
    md.set("instance/preempted", "TRUE")
    assert notices.next() == "instance preempted"
    md.set("instance/preempted", "FALSE")
    assert notices.next() == "preempted over"


def test_event_over_is_reported_when_polled_without_etags() -> None:
    """A server that sends no ETag is polled; a clearing edge is reported all the same."""
    with FakeMetadata(etags=False) as md:
        notices = Notices()
        watcher = MaintenanceWatcher(md.url, notices, interval_s=0.05)
        watcher.start()
        try:
            md.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
            assert notices.next() == "maintenance-event TERMINATE_ON_HOST_MAINTENANCE"
            md.set("instance/maintenance-event", "NONE")
            assert notices.next() == "maintenance-event over"
            assert not any("wait_for_change" in p for p in md.requests), "it polled"
        finally:
            watcher.stop()


def test_notice_present_at_start_is_reported(md: FakeMetadata) -> None:
    md.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
    notices = Notices()
    watcher = MaintenanceWatcher(md.url, notices, interval_s=0.05)
    watcher.start()
    try:
        assert notices.next() == "maintenance-event TERMINATE_ON_HOST_MAINTENANCE"
    finally:
        watcher.stop()


def test_header_required(md: FakeMetadata) -> None:
    status, body, _ = _get(md.url + "instance/maintenance-event")
    assert status == 403 and "Metadata-Flavor" in body
    assert _get(md.url + "instance/maintenance-event", GOOGLE)[:2] == (200, "NONE")


def test_nothing_pending_is_answered_as_gce_does(md: FakeMetadata) -> None:
    """`{}` with ?alt=json (Compute Engine docs); 503 and an error body without it
    (what Google's sapagent sees)."""
    key = md.url + "instance/upcoming-maintenance"
    assert _get(key + "?alt=json", GOOGLE)[:2] == (200, "{}")
    status, body, _ = _get(key, GOOGLE)
    assert status == 503 and json.loads(body)["error"].startswith("no notifications")


WINDOW = {"type": "SCHEDULED", "maintenance_status": "PENDING", "can_reschedule": False,
          "window_start_time": "2030-01-01T00:00:00Z", "window_end_time": "2030-01-01T04:00:00Z",
          "latest_window_start_time": "2030-01-01T00:00:00Z"}
SAID = "upcoming maintenance SCHEDULED at 2030-01-01T00:00:00Z"


@pytest.mark.parametrize("status, body", [
    (200, json.dumps(WINDOW)),  # ?alt=json: snake_case (Compute Engine docs)
    (200, json.dumps({"maintenanceType": "SCHEDULED", "maintenanceStatus": "PENDING",
                      "windowStartTime": "2030-01-01T00:00:00Z"})),  # the TPU docs' camelCase
    (200, "can_reschedule false\nmaintenance_status PENDING\ntype SCHEDULED\n"
          "window_start_time 2030-01-01T00:00:00Z\n"),  # without alt=json (sapagent's test)
])
def test_a_window_is_read_in_every_shape(status: int, body: str) -> None:
    notice = upcoming_notice(status, body)
    assert str(notice) == SAID and notice is not None and not notice.ongoing


@pytest.mark.parametrize("status, body", [
    (404, "<!DOCTYPE html>"), (503, '{ "error": "no notifications have been received yet" }'),
    (200, "{}"), (200, '{"error": "no notifications have been received yet, try again later"}'),
    (200, "NONE"), (200, ""),
])
def test_nothing_pending_in_every_shape(status: int, body: str) -> None:
    assert upcoming_notice(status, body) is None


def test_ongoing_maintenance_without_a_window_is_a_notice_due_now() -> None:
    notice = upcoming_notice(200, json.dumps({"type": "UNSCHEDULED",
                                              "maintenance_status": "ONGOING"}))
    assert notice is not None and notice.ongoing and notice.window is None


@pytest.mark.parametrize("body", ["[1, 2]", "<html>oops</html>", '{"foo": "bar"}', "garbage here"])
def test_an_unreadable_answer_is_no_notice(body: str) -> None:
    with pytest.raises(Unreadable):
        upcoming_notice(200, body)


def test_the_watcher_asks_for_json_and_keeps_its_word_over_an_unreadable_answer(
        md: FakeMetadata, watch: tuple[MaintenanceWatcher, Notices],
        caplog: pytest.LogCaptureFixture) -> None:
    _, notices = watch
    key = "instance/upcoming-maintenance"
    md.set(key, WINDOW)
    assert notices.next() == SAID
    assert any("upcoming-maintenance?alt=json" in p for p in md.requests)
    with caplog.at_level(logging.WARNING, logger="tpuq.agent.gce.metadata"):
        md.set(key, Reply(200, "<html>proxy error</html>"))
        wait = time.monotonic() + WAIT_S
        while "keeping what it said" not in caplog.text and time.monotonic() < wait:
            time.sleep(0.02)
    assert "keeping what it said" in caplog.text
    assert notices.q.empty(), "an unreadable answer changes nothing"
    md.set(key, Reply(503, NO_NOTIFICATIONS_BODY))
    assert notices.next() == "upcoming-maintenance over"


def test_wait_for_change_returns_on_change(md: FakeMetadata) -> None:
    key = "instance/maintenance-event"
    _, _, etag = _get(md.url + key, GOOGLE)
    result: list[tuple[int, str, str | None]] = []
    url = f"{md.url}{key}?wait_for_change=true&last_etag={etag}&timeout_sec=30"
    t = threading.Thread(target=lambda: result.append(_get(url, GOOGLE)))
    t.start()
    _wait_for_hanging_get(md)
    assert t.is_alive()  # it really hangs while the value is unchanged
    md.set(key, "TERMINATE_ON_HOST_MAINTENANCE")
    t.join(WAIT_S)
    assert result and result[0][:2] == (200, "TERMINATE_ON_HOST_MAINTENANCE")
    assert result[0][2] != etag
    # A stale last_etag answers at once, as on GCE.
    assert _get(f"{md.url}{key}?wait_for_change=true&last_etag={etag}", GOOGLE)[1] != "NONE"


def test_wait_for_change_timeout(md: FakeMetadata) -> None:
    url = md.url + "instance/preempted?wait_for_change=true&timeout_sec=0.2"
    start = time.monotonic()
    assert _get(url, GOOGLE)[:2] == (200, "FALSE")
    assert time.monotonic() - start < WAIT_S


def test_stop_returns_quickly(md: FakeMetadata) -> None:
    watcher = MaintenanceWatcher(md.url, Notices(), timeout_s=60, interval_s=30)
    watcher.start()
    _wait_for_hanging_get(md)  # a 60 s hanging GET is in flight
    start = time.monotonic()
    watcher.stop()
    assert time.monotonic() - start < 1.0
    assert not any(t.is_alive() for t in watcher._threads)


def test_disabled_without_base_url() -> None:
    notices = Notices()
    watcher = MaintenanceWatcher(None, notices)
    watcher.start()
    watcher.stop()
    assert not watcher.enabled and notices.q.empty()
    assert read_topology(None) == {
        "accelerator_type": None, "agent_worker_number": None, "worker_network_endpoints": None,
        "tpu_env": None, "instance_name": None,
    }


def test_unreachable_server_does_not_crash() -> None:
    with FakeMetadata() as server:
        url = server.url  # a port that is closed once the server is gone
    retried = threading.Event()

    class OnRetry(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "retry" in record.getMessage():
                retried.set()

    logger = logging.getLogger("tpuq.agent.gce.metadata")
    handler, old_level = OnRetry(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    notices = Notices()
    watcher = MaintenanceWatcher(url, notices, interval_s=0.05)
    watcher.start()
    try:
        assert retried.wait(WAIT_S)  # the error was seen and logged at debug...
        assert all(t.is_alive() for t in watcher._threads)  # ...and the threads live on
    finally:
        watcher.stop()
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    assert notices.q.empty()
    assert read_topology(url, timeout_s=0.5)["accelerator_type"] is None


def test_read_topology(md: FakeMetadata) -> None:
    md.set("instance/attributes/accelerator-type", "v5litepod-8")
    md.set("instance/attributes/agent-worker-number", "3")
    topo = read_topology(md.url)
    assert topo["accelerator_type"] == "v5litepod-8"
    assert topo["agent_worker_number"] == 3
    assert topo["worker_network_endpoints"] is None
    assert topo["instance_name"] == "t1v-n-fake-w-0", "instance/name, not an attribute"


def test_subprocess_server_reads_state_file(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text("{}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.metadata_server", "--port", "0",
         "--state-file", str(state)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        notices = Notices()
        watcher = MaintenanceWatcher(url, notices, interval_s=0.05)
        watcher.start()
        try:
            state.write_text(json.dumps({"instance/preempted": "TRUE"}))
            proc.send_signal(signal.SIGHUP)
            assert notices.next() == "instance preempted"
        finally:
            watcher.stop()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()



def _wait_for_hanging_get(md: FakeMetadata) -> None:
    assert md.wait_for_request("wait_for_change", WAIT_S), "no hanging GET arrived"
