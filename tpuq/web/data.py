"""What each page shows, asked of the handlers as the signed-in person (the same replies
the CLI prints), plus the pictures' data: chips per host, burn-down, the timeline.

Nothing here decides who may see or do what: a Refusal from a handler becomes an HTTP
status (`Refused`), and the pictures carry only what `tpuq status` shows anyone.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from tpuq.api.caller import Caller
from tpuq.api.handlers import Api
from tpuq.errors import TpuqError
from tpuq.jobjson import epoch
from tpuq.protocol import (
    Failure,
    History,
    JobDetail,
    JobList,
    ListJobs,
    QuotaReport,
    Refusal,
    Reply,
    Request,
    Rows,
    ShowJob,
)
from tpuq.state import aggregates, timeline, usage
from tpuq.state.db import Database
from tpuq.state.states import ACTIVE, OPEN, WAITING, JobState, Outcome

R = TypeVar("R", bound=Reply)
HTTP_STATUS = {Failure.FORBIDDEN: 403, Failure.NOT_FOUND: 404, Failure.CONFLICT: 409,
               Failure.REFUSED: 400, Failure.BAD_REQUEST: 400, Failure.UNAVAILABLE: 503,
               Failure.BUSY: 429}
WEEK_S = 7 * 86400.0
SHOWN = 300  # rows of waiting (and of running) jobs a page shows; the count says the rest


class Refused(TpuqError):
    """A handler's refusal, with the HTTP status it means."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def ask(api: Api, caller: Caller, req: Request, expect: type[R]) -> R:
    reply = api.handle(req, caller)
    if isinstance(reply, Refusal):
        raise Refused(HTTP_STATUS.get(reply.kind, 500), reply.error)
    if not isinstance(reply, expect):
        raise Refused(500, f"unexpected reply {reply.NAME!r}")
    return reply


# ---- the queue --------------------------------------------------------------------------------

def queue(api: Api, caller: Caller) -> dict[str, Any]:
    """Waiting jobs in the order the scheduler considers them (with expected starts),
    active jobs, the newest ended ones, and the hosts."""
    reply = ask(api, caller, ListJobs(recent=20, starts=True), JobList)
    waiting = sorted((j for j in reply.jobs if j["state"] in WAITING),
                     key=lambda j: (j["state"] != JobState.QUEUED, j.get("position") or 0, j["id"]))
    active = [j for j in reply.jobs if j["state"] in ACTIVE]
    ended = sorted((j for j in reply.jobs if j["state"] not in OPEN),
                   key=lambda j: -(epoch(j.get("ended_at")) or 0))
    return {"waiting": waiting[:SHOWN], "active": active[:SHOWN], "ended": ended,
            "hosts": reply.hosts, "now": reply.now, "free": free_chips(reply.hosts),
            "counts": {"waiting": len(waiting), "active": len(active)}}


def free_chips(hosts: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per accelerator type: chips free (on hosts that take work), used, out of service."""
    kinds: dict[str, dict[str, Any]] = {}
    for h in hosts:
        k = kinds.setdefault(h["tpu_type"] or "unknown", {"type": h["tpu_type"] or "unknown",
                                                          "free": 0, "used": 0, "out": 0})
        total, used = len(h["chips"]), h["used"]
        k["used"] += used
        k["free" if h["state"] == "ok" else "out"] += max(0, total - used)
    return sorted(kinds.values(), key=lambda k: str(k["type"]))


def chip_map(db: Database, hosts: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each host's chips: which job holds each (owner, pid), and the host's holder note."""
    with db.read() as s:
        rows = timeline.chip_holders(s)
    held: dict[tuple[str, int], Any] = {(r.host, r.chip): r for r in rows}
    out = []
    for h in hosts:
        chips = []
        for chip in h["chips"]:
            r = held.get((h["name"], chip))
            chips.append({"chip": chip, "job": r.job_id if r else None,
                          "owner": r.owner if r else None, "name": r.name if r else None,
                          "state": r.state if r else None, "pid": r.pid if r else None})
        out.append({**h, "chip_list": chips})
    return out


# ---- one job, history --------------------------------------------------------------------------

def job(api: Api, caller: Caller, job_id: int) -> dict[str, Any]:
    return dict(ask(api, caller, ShowJob(id=job_id), JobDetail).job)


def history(api: Api, caller: Caller, *, days: float, user: str | None, team: str | None,
            state: str | None, text: str | None, page: int, size: int
            ) -> tuple[list[dict[str, Any]], bool]:
    """One page of the jobs that ended in the last `days`, newest first, filtered as the
    form asks; and whether there are older ones."""
    rows = ask(api, caller, History(since=time.time() - days * 86400.0, user=user or None,
                                    team=team or None, states=[state] if state else [],
                                    match=text or None, newest=size + 1, skip=page * size),
               Rows).rows
    rows = sorted(rows, key=lambda r: (-(r.get("ended_at") or 0), -r["id"]))
    return rows[:size], len(rows) > size


# ---- teams: use against the grant, burn-down -------------------------------------------------

def teams(api: Api, caller: Caller, db: Database) -> list[dict[str, Any]]:
    rows = ask(api, caller, QuotaReport(), Rows).rows
    starts = {r["team"]: usage.period_start(r["now"], r["budget_period"]) for r in rows
              if r.get("budget_chip_hours") is not None}
    if starts:
        with db.read() as s:
            spans = timeline.charged_spans(s, min(starts.values()))
        for r in rows:
            if r["team"] in starts:
                r["burn_down"] = burn_down(r, starts[r["team"]],
                                           [x for x in spans if x[0] == r["team"]])
    return rows


def burn_down(row: Mapping[str, Any], lo: float, spans: list[Any],
              points: int = 96) -> list[list[float]]:
    """[time (ms), chip-hours left] from the period's start to now: the budget less what
    was charged so far, by a sweep over the attempts' starts and ends."""
    now, budget = float(row["now"]), float(row["budget_chip_hours"])
    events: list[tuple[float, int]] = []
    for _team, n, start, end in spans:
        s, e = max(start, lo), min(end if end is not None else now, now)
        if e > s:
            events += [(s, n), (e, -n)]
    events.sort()
    step = max(60.0, (now - lo) / points)
    out, used, rate, last, i = [], 0.0, 0, lo, 0
    t = lo
    while True:
        while i < len(events) and events[i][0] <= t:
            used += rate * (events[i][0] - last) / 3600.0
            last, rate = events[i][0], rate + events[i][1]
            i += 1
        out.append([t * 1000.0, round(budget - used - rate * (t - last) / 3600.0, 3)])
        if t >= now:
            return out
        t = min(now, t + step)


# ---- the timeline ------------------------------------------------------------------------------

def gantt(db: Database, now: float, span_s: float = WEEK_S) -> dict[str, Any]:
    """Bars (an attempt on a host, from assignment to end) and marks (preemptions,
    maintenance, failures) for the last `span_s`, per host."""
    with db.read() as s:
        rows = timeline.attempts_between(s, now - span_s, now)
    bars, marks = [], []
    for a in rows:
        start = max(a.assigned_at, now - span_s)
        end = a.ended_at if a.ended_at is not None else now
        bars.append({"host": a.host, "job": a.job_id, "attempt": a.number, "owner": a.owner,
                     "from": start * 1000.0, "to": end * 1000.0, "outcome": a.outcome or "running"})
        kind = mark_of(a.outcome, a.reason)
        if kind is not None and a.ended_at is not None:
            marks.append({"host": a.host, "at": a.ended_at * 1000.0, "kind": kind,
                          "job": a.job_id})
    hosts = sorted({b["host"] for b in bars})
    return {"hosts": hosts, "bars": bars, "marks": marks, "from": (now - span_s) * 1000.0,
            "to": now * 1000.0}


def mark_of(outcome: str | None, reason: str | None) -> str | None:
    """What the timeline marks at an attempt's end: maintenance (a notice), preemption
    (any other interruption), failure; None for the rest."""
    if outcome in aggregates.INTERRUPTED:
        why = aggregates.cause(outcome, reason)
        return "maintenance" if why in ("maintenance", "spot") else "preemption"
    if outcome in (Outcome.FAILED, Outcome.TIMEOUT, Outcome.HOST_ERROR):
        return "failure"
    return None
