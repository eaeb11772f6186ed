"""Who may see and do what on the dashboard: every route and action, for someone not
signed in, the job's owner, another user and an admin. The answers are the handlers'
(the CLI's rules); the dashboard adds sign-in, CSRF and the origin check."""

from __future__ import annotations

import re

import pytest

from tests.web.conftest import ADMIN, OTHER, OWNER, Site
from tpuq.state import jobs, webtokens

PAGES = ["/", "/fragments/queue", "/chips", "/fragments/chips", "/teams", "/timeline",
         "/history", "/jobs/{queued}", "/jobs/{ended}"]
# (path, who -> expected status); 303 = done, back to a page
ACTIONS = [
    ("/jobs/{queued}/hold", {OWNER: 303, OTHER: 403, ADMIN: 303}),
    ("/jobs/{queued}/release", {OWNER: 303, OTHER: 403, ADMIN: 303}),
    ("/jobs/{queued}/cancel", {OWNER: 303, OTHER: 403, ADMIN: 303}),
    # as `tpuq resubmit`: a new job of whoever resubmits (another's env is never copied)
    ("/jobs/{ended}/resubmit", {OWNER: 303, OTHER: 303, ADMIN: 303}),
    ("/hosts/tpu-a/drain", {OWNER: 403, OTHER: 403, ADMIN: 303}),
    ("/hosts/tpu-a/undrain", {OWNER: 403, OTHER: 403, ADMIN: 303}),
]
HTML = {"accept": "text/html"}


def path(site: Site, template: str) -> str:
    return template.format(**site.ids)


def csrf_of(client, page: str = "/") -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', client.get(page, headers=HTML).text)
    assert m, "no CSRF field on the page"
    return m.group(1)


def test_nothing_without_signing_in(site: Site) -> None:
    anon = site.client()
    for template in [*PAGES, "/jobs/{ended}/log"]:
        r = anon.get(path(site, template), headers=HTML)
        assert r.status_code == 401, template
        assert 'action="/login"' in r.text  # the sign-in form, not the page
    for template, _ in ACTIONS:
        assert anon.post(path(site, template), data={"csrf": "x"}).status_code == 401, template
    assert anon.get("/metrics").status_code == 200  # loopback: as Prometheus scrapes


@pytest.mark.parametrize("who", [OWNER, OTHER, ADMIN])
def test_every_page_for_every_signed_in_person(site: Site, who: str) -> None:
    c = site.client(who)
    for template in PAGES:
        r = c.get(path(site, template), headers=HTML)
        assert r.status_code == 200, (template, r.text[:300])
    shown = c.get(path(site, "/jobs/{queued}")).text
    if who == OTHER:  # as `tpuq show`: the names of another's environment, not the values
        assert "SECRET=(hidden)" in shown and "s3" not in shown
    else:
        assert "SECRET=s3" in shown
    log = c.get(path(site, "/jobs/{ended}/log"))
    assert log.status_code == (403 if who == OTHER else 200)
    if who == OTHER:
        assert "only its owner or an admin" in log.text


@pytest.mark.parametrize("who", [OWNER, OTHER, ADMIN])
def test_every_action_as_the_handlers_decide(site: Site, who: str) -> None:
    c = site.client(who)
    token = csrf_of(c)
    for template, expected in ACTIONS:
        r = c.post(path(site, template), data={"csrf": token})
        assert r.status_code == expected[who], (who, template, r.text[:300])
        if r.status_code == 403:
            assert "only" in r.text  # the handler's own words: whose it is, or admins only


def test_a_resubmitted_job_is_the_resubmitters(site: Site) -> None:
    c = site.client(OTHER)
    r = c.post(path(site, "/jobs/{ended}/resubmit"), data={"csrf": csrf_of(c)})
    new_id = int(re.search(r"/jobs/(\d+)", r.headers["location"]).group(1))
    with site.db.read() as s:
        assert jobs.owner_of(s, new_id) == OTHER


def test_a_post_without_the_csrf_token_or_from_elsewhere_is_refused(site: Site) -> None:
    c = site.client(OWNER)
    good = csrf_of(c)
    target = path(site, "/jobs/{queued}/hold")
    assert c.post(target, data={}).status_code == 403
    assert c.post(target, data={"csrf": "forged"}).status_code == 403
    assert c.post(target, data={"csrf": good},
                  headers={"origin": "http://evil.example"}).status_code == 403
    assert c.post(target, data={"csrf": good}).status_code == 303  # and the real one works


def test_a_revoked_token_ends_its_sessions(site: Site) -> None:
    c = site.client(OWNER)
    assert c.get("/", headers=HTML).status_code == 200
    with site.db.write() as s:
        (row,) = [r for r in webtokens.listed(s) if r.user == OWNER]
        assert webtokens.revoke(s, row.id)
    assert c.get("/", headers=HTML).status_code == 401


def test_a_wrong_token_signs_nobody_in_and_guessing_is_slowed(site: Site) -> None:
    c = site.client()
    for _ in range(10):
        assert c.post("/login", data={"token": "tpuq_guess"}).status_code == 401
    assert c.post("/login", data={"token": site.tokens[OWNER]}).status_code == 429


def test_a_session_cookie_cannot_be_forged(site: Site) -> None:
    c = site.client()
    c.cookies.set("tpuq_session", "eyJ1IjoiY2Fyb2wifQ.forged.sig")
    assert c.get("/", headers=HTML).status_code == 401


def test_no_open_redirect_after_signing_in(site: Site) -> None:
    c = site.client()
    r = c.post("/login", data={"token": site.tokens[OWNER], "next": "//evil.example/x"})
    assert r.status_code == 303 and r.headers["location"] == "/"


def test_metrics_need_a_token_off_loopback(site: Site) -> None:
    assert site.client(listen="0.0.0.0").get("/metrics").status_code == 403
    site.settings = site.settings.replace(web_metrics_token="m3trics")
    c = site.client(listen="0.0.0.0")
    assert c.get("/metrics").status_code == 401
    r = c.get("/metrics", headers={"authorization": "Bearer m3trics"})
    assert r.status_code == 200 and "tpuq_up 1.0" in r.text


def test_pages_load_nothing_from_elsewhere(site: Site) -> None:
    c = site.client(OWNER)
    r = c.get("/", headers=HTML)
    assert "default-src 'self'" in r.headers["content-security-policy"]
    assert not re.search(r'(src|href)="(https?:)?//', r.text)


def test_the_session_cookie_is_http_only_same_site_and_secure_behind_tls(site: Site) -> None:
    c = site.client()
    r = c.post("/login", data={"token": site.tokens[OWNER]})
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "secure" not in cookie
    r = c.post("/login", data={"token": site.tokens[OWNER]},
               headers={"x-forwarded-proto": "https"})
    assert "secure" in r.headers["set-cookie"].lower()
