"""Acting from the page: each button is one request to the handlers, as the signed-in
person, after the session's CSRF token and the form's origin are checked.

The handlers decide (a job's owner or an admin changes it; only admins drain hosts); a
refusal comes back as its HTTP status and message (403 for another's job).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from tpuq.protocol import Action, Control, Done, Drain, Resubmit, Results
from tpuq.web import data

if TYPE_CHECKING:
    from tpuq.web.site import Web

JOB_ACTIONS = {"cancel": Action.CANCEL, "hold": Action.HOLD, "release": Action.RELEASE}


def job_action(web: Web, request: Request) -> Response:
    caller, _ = web.checked_form(request)
    job_id = int(request.path_params["id"])
    action = request.path_params["action"]
    if action == "resubmit":
        reply = data.ask(web.api, caller, Resubmit(ids=[job_id]), Results)
        r = reply.results[0]
        return _back(f"/jobs/{r['id']}", f"job {r['id']} {r['message']}")
    if action not in JOB_ACTIONS:
        raise data.Refused(404, f"no action {action!r} for jobs")
    r = data.ask(web.api, caller, Control(action=JOB_ACTIONS[action], ids=[job_id]),
                 Results).results[0]
    if not r["ok"]:
        status = data.HTTP_STATUS.get(_failure(r.get("kind")), 409)
        raise data.Refused(status, f"job {job_id} {r['message']}")
    return _back(f"/jobs/{job_id}", f"job {job_id}: {r['message']}")


def host_action(web: Web, request: Request) -> Response:
    caller, _ = web.checked_form(request)
    host = request.path_params["host"]
    action = request.path_params["action"]
    if action not in ("drain", "undrain"):
        raise data.Refused(404, f"no action {action!r} for hosts")
    done = data.ask(web.api, caller, Drain(host=host, draining=action == "drain"), Done)
    return _back("/chips", done.message)


def _failure(kind: str | None) -> Any:
    from tpuq.protocol import Failure

    return Failure(kind) if kind in {f.value for f in Failure} else Failure.CONFLICT


def _back(path: str, said: str) -> Response:
    return RedirectResponse(f"{path}?said={quote(said)}", status_code=303)
