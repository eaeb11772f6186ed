"""Tell owners what became of their jobs: the outbox's sender, through Apprise.

A duty of every agent (a Ticker of its own, so a slow mail server never holds up a job):
claim due rows of the outbox (state/outbox.py), write each message from the job as it is
now, send it to each destination the owner gave (jobs.notify_to: Apprise URLs, so
Slack, Discord, Mattermost, a JSON webhook, e-mail ... without a client of our own), and
record the result. A destination that failed is tried again, and only it, after
notify_retry_s, doubling, up to notify_tries times; then the row is marked failed, the
agent's log says why and `tpuq show` shows it. The log never shows a destination's URL
(it may hold a token), only its scheme.

Each delivery runs in a courier process (agent/duties/courier.py): there every connection is
checked against where notifications may go (tpuq/destinations.py), and Apprise's own
log lines, which name URLs in full, stay.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from tpuq.settings import Settings
from tpuq.spec import job_label, show_duration
from tpuq.state import outbox
from tpuq.state.db import Database
from tpuq.state.states import EVENT_PREEMPTED, EVENT_RESTARTED, EVENT_STARTED, JobState

log = logging.getLogger("tpuq.agent")


@dataclass(frozen=True)
class Message:
    title: str
    body: str
    kind: str  # Apprise's notify type: info, success, warning, failure


_KIND: dict[str, str] = {
    JobState.SUCCEEDED: "success", JobState.FAILED: "failure", JobState.TIMEOUT: "failure",
    JobState.CANCELLED: "warning", EVENT_PREEMPTED: "warning", EVENT_RESTARTED: "warning"}


def message(row: Any, preempts: int) -> Message | None:
    """What to say of one outbox row; None when there is nothing to say (a preemption
    before the count exceeds `preempts`, or after it was told once)."""
    what = job_label(row.name, row.command)
    job = f"job {row.job_id}"
    if row.array_id is not None:
        job += f" (array {row.array_id}, task {row.array_index})"
    if row.event == EVENT_PREEMPTED:
        if row.count != preempts + 1:
            return None
        title = f"tpuq: {job} {what}: preempted {row.count} times"
        lines = [f"{job} ({what}) has been preempted {row.count} times and is "
                 f"queued again; it is now {row.state}.", f"last: {row.reason or '-'}"]
        return Message(title, "\n".join(lines + _commands(row)), _KIND[EVENT_PREEMPTED])
    if row.event == EVENT_RESTARTED:  # its checkpoints are on a host it could not wait for
        lines = [f"{job} ({what}) starts over: {row.detail or 'its checkpoints were lost'}.",
                 f"it is now {row.state}."]
        return Message(f"tpuq: {job} {what} starts over", "\n".join(lines + _commands(row)),
                       _KIND[EVENT_RESTARTED])
    if row.event == EVENT_STARTED:
        lines = [f"{job} ({what}) started" + (f" on {row.host}" if row.host else "")
                 + (f", attempt {row.attempt}" if row.attempt and row.attempt > 1 else "")
                 + (f", {show_duration(row.created_at - row.submitted_at)} after its "
                    "submission" if row.submitted_at else "") + "."]
        return Message(f"tpuq: {job} {what} started", "\n".join(lines + _commands(row)),
                       "info")
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
        told = [(row, message(row, self.settings.notify_preempts)) for row in rows]
        for row, said in told:
            if said is None:
                with self.db.write() as s:
                    outbox.skipped(s, row.id, self.host, "nothing to tell (preemption count)")
        owed = [(row, said, i, url) for row, said in told if said is not None
                for i, url in enumerate((row.notify_to or "").split())
                if str(i) not in (row.sent_to or "").split(",")]
        errors = send_all([(url, said) for _, said, _, url in owed], self.settings)
        for row, said in told:
            if said is not None:
                mine = [(i, url, err) for (r, _, i, url), err in zip(owed, errors, strict=True)
                        if r is row]
                self._record(row, mine)
        return len(rows)

    def _record(self, row: Any, tried: list[tuple[int, str, str | None]]) -> None:
        """What became of the row's destinations tried now: (index, URL, error or None)."""
        cfg = self.settings
        urls = (row.notify_to or "").split()
        done = {int(i) for i in (row.sent_to or "").split(",") if i}
        done |= {i for i, _, error in tried if error is None}
        errors = [f"{scheme(url)}: {error}" for _, url, error in tried if error is not None]
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


COURIER_S, COURIER_EACH_S = 60.0, 30.0  # a batch's time: this, plus this per delivery


def send_all(deliveries: list[tuple[str, Message]], settings: Settings) -> list[str | None]:
    """Send each message to its Apprise URL through one courier process; for each, None
    when it went, else why not (one line, with nothing of the destination in it)."""
    import subprocess
    import sys

    from tpuq import jobenv
    from tpuq.destinations import own_services

    if not deliveries:
        return []
    order = {"deliveries": [{"url": url, "title": said.title, "body": said.body,
                             "kind": said.kind} for url, said in deliveries],
             "allow": settings.notify_allow,
             "own": own_services(settings.database_url, settings.broker_url)}
    limit = COURIER_S + COURIER_EACH_S * len(deliveries)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "tpuq.agent.duties.courier"], input=json.dumps(order),
            capture_output=True, text=True, timeout=limit, check=False,
            env=_courier_env(jobenv.helper_env(os.environ))).stdout
        late = "the courier ended without an answer"
    except subprocess.TimeoutExpired as e:  # what it said before, it did
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        late = f"no answer within {limit:g}s"
    except OSError as e:
        return [f"the courier could not start: {e.strerror}"] * len(deliveries)
    answers: list[str | None] = []
    for line in out.splitlines()[:len(deliveries)]:
        try:
            said_back = json.loads(line)
        except ValueError:
            break
        answers.append(None if said_back.get("ok") else str(said_back.get("error"))[:300])
    return answers + [late] * (len(deliveries) - len(answers))


def _courier_env(env: dict[str, str]) -> dict[str, str]:
    """The agent's environment without tpuq's own (its database URL holds a password):
    the courier needs proxies and locale, never credentials."""
    return {k: v for k, v in env.items() if not k.startswith("TPUQ_")}
