"""Maintenance and preemption notices from the GCE metadata server.

The agent creates one :class:`MaintenanceWatcher` per host.  It watches three sources,
each of which says on its own whether something is pending (:class:`Source`):

* ``instance/maintenance-event`` with hanging GETs (``wait_for_change`` + ``last_etag``;
  by polling when the server sends no ETag),
* ``instance/preempted`` and ``instance/upcoming-maintenance`` by polling,

and calls ``on_change(source, notice)`` once per change of what a source says, from a
watcher thread: a :class:`Notice` when it announces something, ``None`` when it no
longer does (the event back to ``NONE``, the upcoming-maintenance key gone (404),
``preempted`` back to ``FALSE``).  A notice has a kind and, for an announced window,
when it starts and whether the maintenance is already under way:

* ``MAINTENANCE``: ``maintenance-event`` is ``TERMINATE_ON_HOST_MAINTENANCE`` (or another
  non-NONE value);
* ``MIGRATION``: ``MIGRATE_ON_HOST_MAINTENANCE``, live migration; the VM normally survives
  it, so the caller decides;
* ``PREEMPTED``: ``instance/preempted`` is TRUE;
* ``UPCOMING``: ``upcoming-maintenance`` announces a window (SCHEDULED or UNSCHEDULED),
  which may be hours away, so the caller decides when to act (agent/gce/notices.py).  A
  window that moves, or maintenance that becomes ONGOING, is a new notice.

``upcoming-maintenance`` is read as GCE serves it (docs/tpu-facts.md, each shape with its
source): asked with ``?alt=json``, snake_case keys (``type``, ``maintenance_status``,
``window_start_time``) or camelCase ones (``maintenanceType``, ``windowStartTime``, as
the TPU docs show), or "key value" lines; nothing pending is 404, 503, ``{}``, an
``{"error": ...}`` body, an empty body or ``NONE``.  An answer that is none of these is
logged at WARNING and changes nothing: a notice is never invented from it.

The watcher never interprets notices beyond that; it never crashes on network errors
(it backs off and retries, logging at debug level), and an unanswered source keeps what
it said last.  ``base_url=None`` disables it (off GCP).

The hanging GET uses :mod:`http.client` (what urllib is built on) rather than
``urllib.request`` because we need the socket: :meth:`MaintenanceWatcher.stop` shuts it
down so a GET that may hang for ``timeout_s`` ends at once.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any
from urllib.parse import urlencode, urlsplit

from tpuq.errors import Failure, TpuqError

log = logging.getLogger(__name__)

MAINTENANCE_EVENT = "instance/maintenance-event"
PREEMPTED = "instance/preempted"
UPCOMING = "instance/upcoming-maintenance"
MAX_BACKOFF_S = 30.0


class Source(str, Enum):
    """A metadata key that says, on its own, whether something is pending."""

    EVENT = "maintenance-event"
    UPCOMING = "upcoming-maintenance"
    PREEMPTED = "preempted"

    def __str__(self) -> str:
        return self.value


class NoticeKind(str, Enum):
    MAINTENANCE = "maintenance"
    MIGRATION = "migration"  # live migration: processes keep running
    PREEMPTED = "preempted"
    UPCOMING = "upcoming"  # a maintenance window announced ahead

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Notice:
    """One notice from the metadata server. `value` is what the server said (the event,
    or the window's type); `window` the announced window's start as sent; `ongoing`: the
    server says the maintenance is under way."""

    kind: NoticeKind
    value: str = ""
    window: str | None = None
    ongoing: bool = False

    @property
    def source(self) -> Source:
        """The key that said it: a later answer from the same key replaces it."""
        if self.kind is NoticeKind.PREEMPTED:
            return Source.PREEMPTED
        if self.kind is NoticeKind.UPCOMING:
            return Source.UPCOMING
        return Source.EVENT

    @property
    def window_start(self) -> datetime | None:
        """When an announced window opens (timezone-aware), None when unknown."""
        try:
            start = datetime.fromisoformat((self.window or "").replace("Z", "+00:00"))
        except ValueError:
            return None
        return start if start.tzinfo is not None else None

    def __str__(self) -> str:
        """The notice in words, as recorded on the host and on preempted attempts."""
        if self.kind is NoticeKind.MAINTENANCE:
            return f"maintenance-event {self.value}"
        if self.kind is NoticeKind.MIGRATION:
            return f"migrate-only maintenance-event {self.value}"
        if self.kind is NoticeKind.PREEMPTED:
            return "instance preempted"
        if self.ongoing:
            return f"maintenance {self.value} ongoing"
        return f"upcoming maintenance {self.value} at {self.window or 'unknown time'}"


class Unreadable(TpuqError, ValueError):
    """An upcoming-maintenance answer in no shape GCE is known to send."""

    KIND = Failure.UNAVAILABLE


# what the window's fields are called: ?alt=json and "key value" lines (Compute Engine
# docs; Google's sapagent, internal/processmetrics/infra/infra.go) and the TPU docs' camelCase
_TYPE_KEYS = ("type", "maintenanceType", "maintenance_type")
_START_KEYS = ("window_start_time", "windowStartTime")
_STATUS_KEYS = ("maintenance_status", "maintenanceStatus")
_KNOWN_KEYS = frozenset({*_TYPE_KEYS, *_START_KEYS, *_STATUS_KEYS, "window_end_time",
                         "windowEndTime", "latest_window_start_time", "latestWindowStartTime",
                         "can_reschedule", "canReschedule"})
# 503 is what sapagent sees while nothing was ever announced (its
# metadataNoUpcomingMaintenanceResponse); 404 is a key that is not there
_NOTHING_STATUSES = (404, 503)


def _fields(body: str) -> dict[str, Any]:
    """The answer's fields: a JSON object, or "key value" lines. Unreadable otherwise."""
    try:
        info = json.loads(body)
    except ValueError:
        lines = [ln.split(None, 1) for ln in body.splitlines() if ln.strip()]
        info = {kv[0]: kv[1].strip() if len(kv) > 1 else "" for kv in lines}
        if not info or not set(info) <= _KNOWN_KEYS:
            raise Unreadable(f"neither JSON nor key-value lines: {body[:80]!r}") from None
    if not isinstance(info, dict):
        raise Unreadable(f"not an object: {body[:80]!r}")
    return info


def _first(info: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((str(info[k]) for k in keys if info.get(k) not in (None, "")), None)


def upcoming_notice(status: int, body: str) -> Notice | None:
    """What an `upcoming-maintenance` answer says: a notice, or None for nothing pending.
    Raises Unreadable for an answer in no known shape, MetadataError for a server error."""
    if status in _NOTHING_STATUSES:
        return None
    if status != 200:
        raise MetadataError(f"GET {UPCOMING}: HTTP {status}")
    text = body.strip()
    if text in ("", "NONE"):
        return None
    info = _fields(text)
    if not info or "error" in info:
        return None
    kind, start = _first(info, _TYPE_KEYS), _first(info, _START_KEYS)
    state = (_first(info, _STATUS_KEYS) or "").upper()
    if kind is None and start is None and not state:
        raise Unreadable(f"no maintenance fields in {text[:80]!r}")
    return Notice(NoticeKind.UPCOMING, kind or "UNKNOWN", start, ongoing=state == "ONGOING")


class MetadataError(TpuqError):
    """Any failure to get an answer (connection, timeout, unexpected status)."""

    KIND = Failure.UNAVAILABLE


class _Client:
    """Tiny metadata client whose in-flight connections can be aborted from another thread."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self._host = parts.hostname or "metadata.google.internal"
        self._port = parts.port or 80
        self._prefix = parts.path if parts.path.endswith("/") else parts.path + "/"
        self._lock = threading.Lock()
        self._live: set[http.client.HTTPConnection] = set()
        self._closed = False

    def get(self, key: str, timeout_s: float, **query: str) -> tuple[int, str, str | None]:
        """GET ``key``; returns (status, body, etag). Raises MetadataError on I/O errors."""
        path = self._prefix + key + ("?" + urlencode(query) if query else "")
        conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout_s)
        with self._lock:
            if self._closed:
                raise MetadataError("client closed")
            self._live.add(conn)
        try:
            conn.connect()
            with self._lock:
                # Checked after connect: abort() either sees our socket or we see _closed.
                if self._closed:
                    raise MetadataError("client closed")
            conn.request("GET", path, headers={"Metadata-Flavor": "Google"})
            resp = conn.getresponse()
            body = resp.read().decode(errors="replace")
            return resp.status, body, resp.getheader("ETag")
        except (OSError, http.client.HTTPException) as exc:
            raise MetadataError(f"GET {key}: {exc!r}") from exc
        finally:
            with self._lock:
                self._live.discard(conn)
            conn.close()

    def abort(self) -> None:
        """Make every in-flight and future request fail at once."""
        with self._lock:
            self._closed = True
            live = list(self._live)
        for conn in live:
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv in another thread
                except OSError:
                    pass


OnChange = Callable[[Source, Notice | None], None]


class MaintenanceWatcher:
    """Watches the metadata server and reports each change of a source once (module doc)."""

    def __init__(
        self,
        base_url: str | None,
        on_change: OnChange,
        timeout_s: float = 60,
        interval_s: float = 5.0,
    ) -> None:
        self._client = _Client(base_url) if base_url else None
        self._on_change = on_change
        self._timeout_s = timeout_s
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._last_event = "NONE"
        self._preempted = False
        self._upcoming: Notice | None = None

    @property
    def enabled(self) -> bool:
        return self._client is not None

    def start(self) -> None:
        if self._client is None or self._threads:
            return
        for name, target in (("events", self._event_loop), ("poll", self._poll_loop)):
            t = threading.Thread(target=target, name=f"tpuq-metadata-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._client is not None:
            self._client.abort()
        for t in self._threads:
            t.join(timeout_s)

    def _notify(self, source: Source, notice: Notice | None) -> None:
        log.info("metadata %s: %s", source, notice or "nothing pending")
        try:
            self._on_change(source, notice)
        except Exception:  # a buggy callback must not kill the watcher
            log.exception("on_change(%s, %s) raised", source, notice)

    # -- maintenance-event: hanging GETs ----------------------------------------------

    def _event_loop(self) -> None:
        assert self._client is not None
        etag: str | None = None
        backoff = 0.5
        while not self._stop.is_set():
            query = {}
            if etag is not None:  # the first GET returns at once and gives us an ETag
                query = {"wait_for_change": "true", "last_etag": etag,
                         "timeout_sec": str(int(self._timeout_s))}
            try:
                status, body, new_etag = self._client.get(
                    MAINTENANCE_EVENT, self._timeout_s + 10, **query)
            except MetadataError as exc:
                log.debug("maintenance-event: %s; retry in %.1fs", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            if status != 200:
                log.debug("maintenance-event: HTTP %s; retry in %.1fs", status, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                continue
            backoff = 0.5
            etag = new_etag
            self._on_event_value(body.strip())
            if etag is None:  # a server without ETags: fall back to polling
                self._stop.wait(self._interval_s)

    def _on_event_value(self, value: str) -> None:
        value = value or "NONE"
        if value == self._last_event:
            return
        self._last_event = value
        if value == "NONE":  # maintenance over (or cancelled): the next event is new again
            self._notify(Source.EVENT, None)
            return
        kind = NoticeKind.MIGRATION if value.startswith("MIGRATE") else NoticeKind.MAINTENANCE
        self._notify(Source.EVENT, Notice(kind, value))

    # -- preempted and upcoming-maintenance: polling ----------------------------------

    def _poll_loop(self) -> None:
        assert self._client is not None
        backoff = 0.5
        while not self._stop.is_set():
            try:
                self._poll_preempted()
                self._poll_upcoming()
                backoff = 0.5
                delay = self._interval_s
            except MetadataError as exc:
                log.debug("metadata poll: %s; retry in %.1fs", exc, backoff)
                delay = min(backoff, self._interval_s)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            self._stop.wait(delay)

    def _poll_preempted(self) -> None:
        assert self._client is not None
        status, body, _ = self._client.get(PREEMPTED, 5.0)
        if status != 200:
            raise MetadataError(f"GET {PREEMPTED}: HTTP {status}")
        preempted = body.strip().upper() == "TRUE"
        if preempted != self._preempted:
            self._preempted = preempted
            self._notify(Source.PREEMPTED, Notice(NoticeKind.PREEMPTED) if preempted else None)

    def _poll_upcoming(self) -> None:
        assert self._client is not None
        status, body, _ = self._client.get(UPCOMING, 5.0, alt="json")
        try:
            notice = upcoming_notice(status, body)
        except Unreadable as exc:
            log.warning("upcoming-maintenance: %s; keeping what it said before", exc)
            return
        if notice != self._upcoming:
            self._upcoming = notice
            self._notify(Source.UPCOMING, notice)


def preempted_now(base_url: str, timeout_s: float = 2.0) -> bool:
    """`instance/preempted` asked now: TRUE while a spot or preemptible VM is reclaimed
    (Compute Engine docs); False when it says otherwise or does not answer."""
    try:
        status, body, _ = _Client(base_url).get(PREEMPTED, timeout_s)
    except MetadataError:
        return False
    return status == 200 and body.strip().upper() == "TRUE"


def read_topology(base_url: str | None, timeout_s: float = 2.0) -> dict[str, Any]:
    """Host topology from metadata attributes; None values when unknown or unreachable.

    Keys: ``accelerator_type`` (str, e.g. "v4-8"), ``agent_worker_number`` (int),
    ``worker_network_endpoints`` (str, raw), ``tpu_env`` (str, raw: ``KEY: 'value'`` lines),
    ``instance_name`` (str: ``instance/name``, which every GCE VM has; TPU VMs made through
    Compute Engine may lack the Cloud TPU attributes).
    """
    result: dict[str, Any] = {
        "accelerator_type": None, "agent_worker_number": None, "worker_network_endpoints": None,
        "tpu_env": None, "instance_name": None,
    }
    if not base_url:
        return result
    client = _Client(base_url)
    for key in result:
        path = "instance/name" if key == "instance_name" else \
            "instance/attributes/" + key.replace("_", "-")
        try:
            status, body, _ = client.get(path, timeout_s)
        except MetadataError as exc:
            log.debug("read_topology: %s", exc)
            if key == "accelerator_type":
                break  # unreachable server: do not pay the timeout three times
            continue
        if status == 200 and body.strip():
            result[key] = body.strip()
    try:
        if result["agent_worker_number"] is not None:
            result["agent_worker_number"] = int(result["agent_worker_number"])
    except ValueError:
        result["agent_worker_number"] = None
    return result
