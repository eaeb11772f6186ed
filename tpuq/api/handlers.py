"""The Api: one method per request, authorized for its caller, answered with a Reply.

A job is changed only by its owner or an admin; hosts, quotas and admins only by
admins; a resubmitted job belongs to whoever resubmits it. Everyone sees the queue
(names, states, reasons); a job's output and the values of its captured environment
are its owner's and the admins'.
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from tpuq import arrays, runfn
from tpuq.api import logs, objects
from tpuq.api.caller import Caller, Denied, not_found, owned_job, require_admin
from tpuq.protocol import (
    AdminSet,
    Control,
    Done,
    Drain,
    Failure,
    FleetReport,
    FleetView,
    ForgetHost,
    History,
    Identity,
    JobDetail,
    JobList,
    ListJobs,
    Membership,
    QuotaReport,
    QuotaSet,
    ReadLog,
    ReadResult,
    Refusal,
    Reply,
    Request,
    Resubmit,
    ResultChunk,
    Results,
    Rows,
    ShowJob,
    Submit,
    SubmitMany,
    Submitted,
    Update,
    WhoAmI,
)
from tpuq.settings import Settings
from tpuq.spec import JobSpec, SpecError, check_update
from tpuq.state import (
    admins,
    admission,
    attempts,
    deps,
    functions,
    gangs,
    history,
    hosts,
    jobs,
    logusage,
    outage,
    outbox,
    pgsubmit,
    queries,
    teams,
    usage,
)
from tpuq.state.db import Database
from tpuq.state.states import JobState, StopRequest
from tpuq.submitopts import Resubmission

log = logging.getLogger("tpuq.api")
RESULT_CHUNK = 512 * 1024  # bytes of a function's outcome per reply (base64 stays < 1 MiB)
Reasons = Callable[[], Mapping[int, str]]  # job id -> why it waits
Starts = Callable[[], Mapping[int, Any]]  # job id -> forecast.Start (when it should start)


class Api:
    """`here` is this machine's host name (whose log files are local); `reasons` says
    why queued jobs wait (the scheduler's view)."""

    def __init__(self, settings: Settings, db: Database, *, here: str,
                 reasons: Reasons | None = None, starts: Starts | None = None) -> None:
        self.settings = settings
        self.db = db
        self.here = here
        self.reasons = reasons or self._plan_reasons
        self._rule: Any = None  # where notifications may go, once asked (destinations.Rule)
        self.starts = starts or self._plan_starts
        self._handlers: dict[type[Request], Callable[[Any, Caller], Reply]] = {
            WhoAmI: self.whoami, Submit: self.submit, ListJobs: self.list_jobs,
            ShowJob: self.show, ReadLog: self.read_log, Control: self.control,
            SubmitMany: self.submit_many, Resubmit: self.resubmit, Drain: self.drain,
            ForgetHost: self.forget_host,
            QuotaReport: self.quota, History: self.history, Update: self.update,
            QuotaSet: self.quota_set, Membership: self.membership, AdminSet: self.admin_set,
            ReadResult: self.read_result, FleetReport: self.fleet,
        }

    def handle(self, req: Request, caller: Caller) -> Reply:
        handler = self._handlers.get(type(req))
        if handler is None:
            return Refusal(kind=Failure.BAD_REQUEST, error=f"{req.OP} is not served here")
        try:
            return handler(req, caller)
        except (Denied, SpecError, teams.TeamError, hosts.HostLive) as e:
            return Refusal(kind=e.kind, error=str(e))
        except Exception as e:
            kind = outage.refusal(e)
            if kind is None:
                raise
            return Refusal(kind=kind, error=outage.describe(e, self.db.safe_url))

    def check_destinations(self, urls: str | None) -> None:
        """SpecError (one line) for a notification destination the deployment refuses
        (tpuq/destinations.py); the courier refuses it again when it connects."""
        if not urls:
            return
        from tpuq.destinations import Refused, Rule, own_services

        if self._rule is None:
            cfg = self.settings
            self._rule = Rule.of(cfg.notify_allow, own_services(cfg.database_url,
                                                                cfg.broker_url))
        for url in urls.split():
            try:
                self._rule.check_url(url)
            except Refused as e:
                raise SpecError(str(e)) from None

    # ---- who, and the queue ----------------------------------------------------------
    def whoami(self, req: WhoAmI, caller: Caller) -> Reply:
        return Identity(user=caller.name, admin=caller.admin)

    def submit(self, req: Submit, caller: Caller) -> Reply:
        if not self.db.is_sqlite:  # a plain job: two round trips (state/pgsubmit.py)
            reply = pgsubmit.submit_as(self.db.engine, self.settings, req, caller.name,
                                       caller.admin)
            if reply is not None:
                return reply
        spec = JobSpec.from_dict({**req.spec, "owner": caller.name})
        self.check_destinations(spec.notify_to)
        with self.db.write() as s:
            warnings = admission.admit(s, spec, admin=caller.admin, open_team=self.settings.team)
            if req.array:
                tasks = jobs.submit_array(s, arrays.checked_tasks(spec, req.array,
                                                                  req.array_args),
                                          req.throttle, actor=caller.name, held=req.held)
            else:
                tasks = [jobs.submit(s, spec, actor=caller.name, held=req.held)]
            if req.function:
                functions.store_payload(s, tasks[0], _function_payload(
                    req.function, spec, array=bool(req.array)))
            deps.add(s, tasks, deps.resolve(s, req.after, req.after_tasks),
                     deps.resolve(s, req.after_any, req.after_any_tasks, "--after-any"))
            warnings += [f"warning: {objects.budget_object(r)['says']}"
                         for r in logusage.over_budget(s, caller.name)]
        return Submitted(id=tasks[0], tasks=tasks if req.array else [], warnings=warnings)

    def submit_many(self, req: SubmitMany, caller: Caller) -> Reply:
        batch = [_batch_entry(req.common, job, caller.name) for job in req.jobs]
        if not batch:
            raise SpecError("no jobs to submit")
        for urls in {e.spec.notify_to for e in batch}:
            self.check_destinations(urls)
        admitted: dict[tuple[Any, ...], list[str]] = {}
        with self.db.write() as s:
            for e in batch:  # what admission looks at, once per kind of job
                key = (e.spec.team, e.spec.tpu_type, e.spec.chips)
                if key not in admitted:
                    admitted[key] = admission.admit(s, e.spec, admin=caller.admin,
                                                    open_team=self.settings.team)
            ids = jobs.submit_batch(s, [e.spec for e in batch], [e.held for e in batch],
                                    actor=caller.name)
            functions.store_payloads(s, [(job_id, e.function) for job_id, e
                                         in zip(ids, batch, strict=True) if e.function])
            for job_id, e in zip(ids, batch, strict=True):
                if e.after or e.after_any:  # an array's id: every task of it
                    deps.add(s, [job_id], deps.resolve(s, e.after, []),
                             deps.resolve(s, e.after_any, [], "after_any"))
            warnings = [w for ws in admitted.values() for w in ws]
            warnings += [f"warning: {objects.budget_object(r)['says']}"
                         for r in logusage.over_budget(s, caller.name)]
        return Submitted(id=ids[0], tasks=ids, warnings=list(dict.fromkeys(warnings)))

    def read_result(self, req: ReadResult, caller: Caller) -> Reply:
        with self.db.read() as s:
            row = owned_job(s, caller, req.id, "result")
            fn = functions.result_of(s, req.id)
        if fn is None:
            raise not_found(f"job {req.id} is not a function job (tpuq.client.submit(fn))")
        data = fn.result
        whose = {"owner": row.owner, "yours": row.owner == caller.own_name}
        if data is None:
            return ResultChunk(state=row.state, **whose)
        start = max(0, req.offset)
        chunk = data[start:start + RESULT_CHUNK]
        return ResultChunk(state=row.state, size=len(data),
                           data=base64.b64encode(chunk).decode(), **whose)

    def list_jobs(self, req: ListJobs, caller: Caller) -> Reply:
        # the fleet's modules only where asked: a client without an agent that only
        # submits (an array from a laptop) does not import them
        from tpuq.fleet import report

        with self.db.read() as s:
            tasks: dict[int, list[int]] | None = {} if req.collapse else None
            rows = queries.list_jobs(s, states=req.states or None, owner=req.owner,
                                     team=req.team, recent=10**9 if req.everything
                                     else max(0, req.recent), folded=tasks)
            host_rows = queries.hosts_with_jobs(s)
            now = queries.now(s)
            min_code = hosts.min_code(s)
            current = queries.current_attempts(s, rows)
            fleet = report.waiting_lines(s)
            over: dict[str, list[dict[str, Any]]] = {}
            for r in logusage.over_budget(s):
                over.setdefault(r.place, []).append(objects.budget_object(r))
        queued = any(r.state == JobState.QUEUED for r in rows)
        reasons = self.reasons() if queued and not req.starts else {}
        starts = self.starts() if queued and req.starts else {}
        stale = self.settings.host_stale_s
        return JobList(jobs=cast("list[dict[str, Any]]", [
            objects.listed_job(r, waiting=reasons.get(r["id"]), current=current.get(r["id"]),
                             start=starts.get(r["id"]),
                             tasks=tasks.get(r["id"]) if tasks else None)
            for r in objects.row_dicts(rows)]),
                       hosts=[objects.host_object(h, j, now, stale, min_code, over.get(h.name))
                              for h, j in host_rows], now=now, fleet=fleet)

    def show(self, req: ShowJob, caller: Caller) -> Reply:
        with self.db.read() as s:
            row = queries.job(s, req.id)
            if row is None:
                raise not_found(f"job {req.id} does not exist")
            env = queries.envs(s, [req.id]).get(req.id, {})
            atts = queries.attempts_of(s, req.id)
            events = queries.events_of(s, req.id)
            gang = gangs.workers_of(s, [req.id]).get(req.id, [])
            told = outbox.of_jobs(s, [req.id]).get(req.id, [])
            after = deps.of_job(s, req.id)
            tasks = queries.array_tasks(s, req.id) if row.array_id == req.id else []
            over = [objects.budget_object(r) for r in logusage.over_budget(s, row.owner)]
        waiting = self.reasons().get(req.id) if row.state == JobState.QUEUED else None
        return JobDetail(job=cast("dict[str, Any]", objects.shown_job(
            row, caller, env, waiting, [objects.attempt_object(a) for a in atts],
            [objects.worker_object(w) for w in gang], [objects.event_object(e) for e in events],
            [objects.notification_object(n) for n in told], over, after, tasks)))

    def read_log(self, req: ReadLog, caller: Caller) -> Reply:
        return logs.read(self.settings, self.db, self.here, req, caller)

    # ---- changing jobs ---------------------------------------------------------------------
    def control(self, req: Control, caller: Caller) -> Reply:
        out: dict[int, dict[str, Any]] = {}
        with self.db.write() as s:
            tasks = queries.open_tasks(s, req.arrays)
            if req.arrays and not tasks:
                raise not_found(f"no open task in array {', '.join(map(str, req.arrays))}")
            wanted = list(dict.fromkeys([*req.ids, *tasks]))
            owners = jobs.owners_of(s, wanted)
            allowed = []
            for job_id in wanted:
                owner = owners.get(job_id)
                if owner is None:
                    out[job_id] = _result(jobs.Result(job_id, False, "does not exist"))
                elif not caller.owns(owner):
                    out[job_id] = _result(jobs.Result(
                        job_id, False, f"is {owner}'s job; only its owner or an admin may "
                                       "change it"), Failure.FORBIDDEN)
                else:
                    allowed.append(job_id)
            for r in jobs.act_on_many(s, req.action.value, allowed, caller.name):
                out[r.job_id] = _result(r)
        return Results(results=[out[j] for j in wanted])

    def update(self, req: Update, caller: Caller) -> Reply:
        check_update(req.priority, req.time_limit_s, req.begin_at)
        with self.db.write() as s:
            owner = jobs.owner_of(s, req.id)
            if owner is None:
                raise not_found(f"job {req.id} does not exist")
            if not caller.owns(owner):
                raise Denied(Failure.FORBIDDEN, f"job {req.id} is {owner}'s; only its owner "
                                                "or an admin may change it")
            r = jobs.update(s, req.id, caller.name, priority=req.priority,
                            time_limit_s=req.time_limit_s, begin_at=req.begin_at)
        return Results(results=[_result(r)])

    def resubmit(self, req: Resubmit, caller: Caller) -> Reply:
        self.check_destinations(req.notify_to)
        with self.db.write() as s:
            ids = list(req.ids)
            if req.failed:
                ids += [i for i in jobs.failed_since(s, req.failed_since)
                        if caller.owns(jobs.owner_of(s, i) or "")]
            if req.dry_run or not ids:
                return Done(message="nothing to resubmit" if not ids else
                            "would resubmit jobs " + " ".join(map(str, ids)))
            results = jobs.resubmit(s, ids, caller.name, Resubmission(
                env=dict(req.env), notify=req.notify, notify_to=req.notify_to))
        return Results(results=[_result(r) for r in results])

    # ---- hosts, quotas, admins (admins only) ---------------------------------------------------
    def drain(self, req: Drain, caller: Caller) -> Reply:
        require_admin(caller, "drain hosts")
        with self.db.write() as s:
            if not hosts.set_draining(s, req.host, req.draining):
                raise not_found(f"no host named {req.host!r} (see `tpuq status`)")
            stopped = [jobs.request_stop(s, j.id, caller.name, StopRequest.PREEMPT)
                       for j, _ in attempts.active_on_host(s, req.host)] if req.draining else []
        verb = "draining" if req.draining else "taking work again"
        also = f"; preempting jobs {' '.join(str(r.job_id) for r in stopped)}" if stopped else ""
        return Done(message=f"{req.host}: {verb}{also}")

    def forget_host(self, req: ForgetHost, caller: Caller) -> Reply:
        require_admin(caller, "forget hosts")
        with self.db.write() as s:
            if not hosts.forget(s, req.host, self.settings.host_stale_s):
                raise not_found(f"no host named {req.host!r} (see `tpuq status`)")
        return Done(message=f"{req.host}: forgotten (its agent registers it again if it starts)")

    def history(self, req: History, caller: Caller) -> Reply:
        with self.db.read() as s:
            return Rows(rows=history.ended(
                s, since=req.since, until=req.until, user=req.user, team=req.team,
                states=req.states, match=req.match,
                newest=None if req.newest is None else max(0, min(req.newest, 10_000)),
                skip=max(0, req.skip)))

    def fleet(self, req: FleetReport, caller: Caller) -> Reply:
        from tpuq.fleet import costs, report

        with self.db.read() as s:
            shown = report.view(s)
            since = req.since if req.since is not None else shown["now"] - 30 * 86400
            return FleetView(view=shown, costs=costs.chip_hours(s, since, req.until))

    def quota(self, req: QuotaReport, caller: Caller) -> Reply:
        with self.db.read() as s:
            return Rows(rows=usage.report(s, self.settings.fair_share_half_life_h))

    def quota_set(self, req: QuotaSet, caller: Caller) -> Reply:
        require_admin(caller, "change quotas")
        with self.db.write() as s:
            row = teams.set_quota(s, req.team, **req.values)
            shown = {k: getattr(row, k) for k in teams.QUOTA_FIELDS}
        return Rows(rows=[{"team": req.team, **shown}])

    def membership(self, req: Membership, caller: Caller) -> Reply:
        require_admin(caller, "change teams")
        with self.db.write() as s:
            if req.member:
                added = teams.add_member(s, req.team, req.user)
                return Done(message=f"{req.user} {'added to' if added else 'is already in'} "
                                    f"team {req.team}")
            if not teams.remove_member(s, req.team, req.user):
                raise not_found(f"{req.user} is not in team {req.team}")
        return Done(message=f"{req.user} removed from team {req.team}")

    def admin_set(self, req: AdminSet, caller: Caller) -> Reply:
        require_admin(caller, "change who is an admin")
        with self.db.write() as s:
            changed = admins.add(s, req.user) if req.admin else admins.remove(s, req.user)
        if req.admin:
            return Done(message=f"{req.user} {'is now' if changed else 'is already'} an admin")
        if not changed:
            raise Denied(Failure.NOT_FOUND, f"{req.user} is not an admin")
        return Done(message=f"{req.user} is no longer an admin")

    # ---- why jobs wait ---------------------------------------------------------------------
    def _plan_reasons(self) -> Mapping[int, str]:
        from tpuq.scheduler.passes import waiting_reasons

        started = time.monotonic()
        reasons = waiting_reasons(self.db, self.settings)
        log.debug("waiting reasons in %.0f ms", (time.monotonic() - started) * 1000)
        return reasons

    def _plan_starts(self) -> Mapping[int, Any]:
        from tpuq.scheduler.passes import expected_starts

        started = time.monotonic()
        starts = expected_starts(self.db, self.settings)
        log.debug("start forecast in %.0f ms", (time.monotonic() - started) * 1000)
        return starts


def _result(r: jobs.Result, kind: Failure | None = None) -> dict[str, Any]:
    """A result for the client; a failure's kind sets the CLI's exit status."""
    if r.ok:
        kind = None
    elif kind is None:
        kind = Failure.NOT_FOUND if r.message == "does not exist" else Failure.CONFLICT
    return {"id": r.job_id, "ok": r.ok, "message": r.message,
            "kind": None if kind is None else kind.value}


BATCH_KEYS = frozenset({"spec", "held", "after", "after_any", "function"})


@dataclass
class _Entry:
    spec: JobSpec
    held: bool
    after: list[int]
    after_any: list[int]
    function: bytes | None


def _batch_entry(common: dict[str, Any], job: dict[str, Any], owner: str) -> _Entry:
    """One job of a SubmitMany, checked as a Submit's fields are (protocol.py): its
    entry is a dict of anything until here."""
    unknown = set(job) - BATCH_KEYS
    if unknown:
        raise SpecError(f"unknown fields of a batch job: {', '.join(sorted(unknown)[:5])}")
    fields = job.get("spec", {})
    held, function = job.get("held", False), job.get("function", "")
    if not isinstance(fields, dict) or not isinstance(held, bool) \
            or not isinstance(function, str):
        raise SpecError("a batch job is {spec: object, held: bool, function: text, ...}")
    after = [_job_id(i, "after") for i in _listed(job.get("after", []), "after")]
    after_any = [_job_id(i, "after_any") for i in _listed(job.get("after_any", []),
                                                              "after_any")]
    spec = JobSpec.from_dict({**common, **fields, "owner": owner})
    payload = _function_payload(function, spec, array=False) if function else None
    return _Entry(spec, held, after, after_any, payload)


def _listed(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise SpecError(f"{what} must be a list of job ids")
    return value


def _job_id(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**63:
        raise SpecError(f"{what}: job ids are positive integers")
    return value


def _function_payload(function: str, spec: JobSpec, *, array: bool) -> bytes:
    """A function job's pickled call, checked: SpecError for what cannot run."""
    if array:
        raise SpecError("a function job is one call: submit one per argument set")
    if spec.workers is not None:
        raise SpecError(f"a function job runs on one host; a {spec.tpu_type} job runs a "
                        "script on each of its workers")
    if not runfn.is_function_command(spec.command):
        raise SpecError("a function job's command is [python, '-m', 'tpuq.runfn']")
    try:
        payload = base64.b64decode(function, validate=True)
    except (binascii.Error, ValueError):
        raise SpecError("the function is not base64") from None
    refused = runfn.too_big(payload)
    if refused:
        raise SpecError(refused)
    return payload
