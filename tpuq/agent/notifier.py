"""Tell owners what became of their jobs: the outbox's sender, through Apprise.

A duty of every agent (a Ticker of its own, so a slow mail server never holds up a job):
claim due rows of the outbox (state/outbox.py), write each message from the job as it is
now, send it to each destination the owner gave (jobs.notify_to: Apprise URLs, so
Slack, Discord, Mattermost, a JSON webhook, e-mail ... without a client of our own), and
record the result. A destination that failed is tried again, and only it, after
notify_retry_s, doubling, up to notify_tries times; then the row is marked failed, the
agent's log says why and `tpuq show` shows it. The log never shows a destination's URL
(it may hold a token), only its scheme.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tpuq.settings import Settings
from tpuq.spec import job_label, show_duration
from tpuq.state import outbox
from tpuq.state.db import Database

log = logging.getLogger("tpuq.agent")


@dataclass(frozen=True)
class Message:
    title: str
    body: str
    kind: str  # Apprise's notify type: info, success, warning, failure


_KIND = {"succeeded": "success", "failed": "failure", "timeout": "failure",
         "cancelled": "warning", "preempted": "warning", "restarted": "warning"}


def message(row: Any, preempts: int) -> Message | None:
    """What to say of one outbox row; None when there is nothing to say (a preemption
    before the count exceeds `preempts`, or after it was told once)."""
    what = job_label(row.name, row.command)
    job = f"job {row.job_id}"
    if row.array_id is not None:
        job += f" (array {row.array_id}, task {row.array_index})"
    if row.event == "preempted":
        if row.count != preempts + 1:
            return None
        title = f"tpuq: {job} {what}: preempted {row.count} times"
        lines = [f"{job} ({what}) has been preempted {row.count} times and is "
                 f"queued again; it is now {row.state}.", f"last: {row.reason or '-'}"]
        return Message(title, "\n".join(lines + _commands(row)), _KIND["preempted"])
    if row.event == "restarted":  # its checkpoints are on a host it could not wait for
        lines = [f"{job} ({what}) starts over: {row.detail or 'its checkpoints were lost'}.",
                 f"it is now {row.state}."]
        return Message(f"tpuq: {job} {what} starts over", "\n".join(lines + _commands(row)),
                       _KIND["restarted"])
    title = f"tpuq: {job} {what} {row.event}"
    lines = [f"{job} ({what}) {row.event}" + (f" on {row.host}" if row.host else "")
             + f" after {row.attempt} attempt{'s' if row.attempt != 1 else ''}"
             + (f", {show_duration(row.ended_at - row.submitted_at)} after its submission"
                if row.ended_at and row.submitted_at else "") + "."]
    if row.exit_code is not None or row.exit_signal is not None:
        lines.append(f"exit: {row.exit_code if row.exit_code is not None else '-'}"
                     + (f", signal {row.exit_signal}" if row.exit_signal else ""))
    if row.reason:
        lines.append(f"reason: {row.reason}")
    if row.preemptions:
        lines.append(f"preempted {row.preemptions} times (not charged)")
    return Message(title, "\n".join(lines + _commands(row)), _KIND.get(row.event, "info"))


def _commands(row: Any) -> list[str]:
    return ["", f"tpuq show {row.job_id}    tpuq logs {row.job_id}"]


def scheme(url: str) -> str:
    """How a destination is named in logs and errors: its scheme only (the rest may be
    a token or a password)."""
    return url.split("://", 1)[0] + "://"


class Notifier:
    def __init__(self, settings: Settings, db: Database, host: str) -> None:
        self.settings = settings
        self.db = db
        self.host = host

    def run_once(self) -> int:
        """Send what is due; how many rows were settled (sent, skipped or failed)."""
        with self.db.read() as s:
            if not outbox.any_due(s):
                return 0
        with self.db.write() as s:
            rows = outbox.claim(s, self.host)
        for row in rows:
            self._settle(row)
        return len(rows)

    def _settle(self, row: Any) -> None:
        cfg = self.settings
        said = message(row, cfg.notify_preempts)
        if said is None:
            with self.db.write() as s:
                outbox.skipped(s, row.id, self.host, "nothing to tell (preemption count)")
            return
        urls = (row.notify_to or "").split()
        done = {int(i) for i in (row.sent_to or "").split(",") if i}
        errors = []
        for i, url in enumerate(urls):
            if i in done:
                continue
            error = send(url, said)
            if error is None:
                done.add(i)
            else:
                errors.append(f"{scheme(url)}: {error}")
        label = f"notification {row.id} (job {row.job_id} {row.event})"
        with self.db.write() as s:
            if not errors:
                outbox.sent(s, row.id, self.host)
                log.info("%s sent to %s", label, ", ".join(map(scheme, urls)) or "nobody")
                return
            why, tries = "; ".join(errors), row.tries + 1
            retry = cfg.notify_retry_s * 2 ** (tries - 1) if tries < cfg.notify_tries else None
            outbox.failed(s, row.id, self.host, why, sorted(done), retry_in_s=retry)
        if retry is None:
            log.warning("%s: given up after %d tries: %s", label, tries, why)
        else:
            log.warning("%s: try %d of %d failed (%s); again in %s", label, tries,
                        cfg.notify_tries, why, show_duration(retry))


def send(url: str, said: Message) -> str | None:
    """Send one message to one Apprise URL; None when it went, else why not (one line)."""
    import apprise

    sender = apprise.Apprise()
    if not sender.add(url):
        return "not a notification URL Apprise knows (see `apprise --details`)"
    heard: list[str] = []

    def keep(entry: Any, _plugin: Any) -> None:
        if str(getattr(entry, "level", "ERROR")).upper() in ("WARNING", "ERROR", "CRITICAL"):
            heard.append(str(getattr(entry, "message", entry)))

    try:
        ok = sender.notify(body=said.body, title=said.title, notify_type=said.kind,
                           log_callback=keep)
    except Exception as e:  # noqa: BLE001 - a plugin's bug must not stop the sender
        return f"{type(e).__name__}: {e}"
    if ok:
        return None
    return (heard[-1] if heard else "the destination refused it").splitlines()[0][:300]
