"""The dashboard in a real browser (Debian's chromium driven by Playwright) against a
real deployment: an agent on a fake host with a job running, one preempted and one
failed. What a person would check: the running job's row, the charts drawn, a log line
arriving while the page is open, an action refused to another user.

Screenshots of every page are kept in this test's temporary directory, under
`screenshots/` (pytest prints it with -rA; `--basetemp DIR` puts it where you like).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import TPUQ, Stack, fixture_cmd, wait_for
from tests.services import free_port

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [pytest.mark.embedded_only,
              pytest.mark.skipif(shutil.which(CHROMIUM) is None,
                                 reason="needs Debian's chromium (.ci/run installs it)")]


@pytest.fixture
def deployment(stack: Stack, host: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """An agent, jobs in every state a person looks for, tokens, and `tpuq web`."""
    stack.start_agent(host)
    stack.tpuq("quota", "set", "default", "--budget", "100", "--period", "day")
    gate = tmp_path / "gate"
    failed = stack.submit("--chips", "1", "--name", "broken", "--", "sh", "-c", "exit 3")
    stack.wait_state(failed, "failed")
    preempted = stack.submit("--chips", "1", "--name", "resumable",
                             *fixture_cmd("until_gate.py", tmp_path / "never"))
    stack.wait_process(preempted)
    stack.tpuq("preempt", str(preempted))
    wait_for(lambda: len(stack.attempts(preempted)) >= 2, 30, "the preempted job to run again")
    running = stack.submit("--chips", "2", "--name", "talker",
                           *fixture_cmd("talk_on_gate.py", gate, "said after the page loaded"))
    stack.wait_log(running, "first line")
    waiting = stack.submit("--name", "whole-host", "--time", "1h", "--", "/bin/true")
    tokens = {who: stack.tpuq("web", "token", "add", who).stdout.split()[-1]
              for who in ("tester", "bob")}
    port = free_port()
    log = open(tmp_path / "web.log", "wb")
    web = subprocess.Popen([*TPUQ, "web", "--port", str(port)], env=stack.env(),
                           stdout=log, stderr=subprocess.STDOUT)
    log.close()
    try:
        wait_for(lambda: b"tpuq web on" in (tmp_path / "web.log").read_bytes(), 30, "tpuq web")
        yield {"url": f"http://127.0.0.1:{port}", "tokens": tokens, "gate": gate,
               "jobs": {"failed": failed, "preempted": preempted, "running": running,
                        "waiting": waiting}}
    finally:
        web.terminate()
        web.wait(10)
        (gate.parent / (gate.name + ".done")).touch()
        (tmp_path / "never").touch()


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield b
        finally:
            b.close()


def signed_in(browser: Any, d: dict[str, Any], who: str, tmp_path: Path) -> Any:
    """A fresh browser profile signed in as `who` through the sign-in form."""
    page = browser.new_context().new_page()
    outside: list[str] = []
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(d["url"]) else None)
    page.outside = outside
    page.goto(d["url"] + "/")
    page.fill("#token", d["tokens"][who])
    page.click("#sign-in")
    page.wait_for_selector("#who")
    assert page.inner_text("#who").startswith(who)
    return page


def shot(page: Any, tmp_path: Path, name: str) -> None:
    folder = tmp_path / "screenshots"
    folder.mkdir(exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def wait_for_chart(page: Any, canvas: str) -> None:
    """Wait until the chart on `canvas` is drawn; while a page loads, Chart.js may not be yet."""
    page.wait_for_function(
        f"() => typeof Chart !== 'undefined' && !!Chart.getChart(document.querySelector({canvas!r}))")


def test_a_person_reads_the_queue_follows_a_log_and_is_refused_what_is_not_theirs(
        deployment: dict[str, Any], browser: Any, tmp_path: Path, stack: Stack) -> None:
    d, jobs = deployment, deployment["jobs"]
    page = signed_in(browser, d, "tester", tmp_path)
    row = page.locator(f"#running tr[data-job='{jobs['running']}']")
    assert "talker" in row.inner_text() and "running" in row.inner_text()
    assert "tpu-a" in row.inner_text()
    wait_for_chart(page, "#free-chart")
    # the start forecast arrives with a refresh of the queue (it is made in the background)
    queued = f"#waiting tr[data-job='{jobs['waiting']}']"
    page.wait_for_selector(f"{queued} td.reason:has-text('no time limit')", timeout=20000)
    assert page.locator(f"{queued} td").first.inner_text() == "1"  # first in line
    shot(page, tmp_path, "queue")

    page.goto(f"{d['url']}/chips")
    chip = page.locator(f".chip.held:has-text('job {jobs['running']}')").first
    assert "tester" in chip.inner_text() and "pid" in chip.inner_text()
    shot(page, tmp_path, "chips")

    page.goto(f"{d['url']}/timeline")  # the last 7 days
    wait_for_chart(page, "#gantt-chart")
    with page.expect_navigation(url="**/timeline?hours=1"):
        page.click("text=hour")  # the last hour: this test's attempts are seconds long
    wait_for_chart(page, "#gantt-chart")
    marks = page.evaluate("() => Chart.getChart(document.querySelector('#gantt-chart'))"
                          ".data.datasets.filter(s => s.type === 'scatter')"
                          ".map(s => [s.label, s.data.length])")
    assert dict(marks)["failure"] >= 1 and dict(marks)["preemption"] >= 1
    shot(page, tmp_path, "timeline")

    page.goto(f"{d['url']}/teams")
    assert page.locator("#teams tr[data-team='default']").count() == 1
    wait_for_chart(page, "canvas.burn-chart[data-team='default']")
    shot(page, tmp_path, "teams")

    page.goto(f"{d['url']}/history?q=broken")
    assert page.locator(f"#history tr[data-job='{jobs['failed']}'] .state").inner_text() == "failed"
    shot(page, tmp_path, "history")

    page.goto(f"{d['url']}/jobs/{jobs['running']}")
    page.wait_for_function("() => document.querySelector('#log').textContent.includes('first line')")
    d["gate"].touch()  # the job prints its next line only now
    page.wait_for_function("() => document.querySelector('#log').textContent"
                           ".includes('said after the page loaded')", timeout=20000)
    shot(page, tmp_path, "job")
    assert page.outside == [], f"requests to other hosts: {page.outside}"

    other = signed_in(browser, d, "bob", tmp_path)
    other.goto(f"{d['url']}/jobs/{jobs['running']}")
    assert other.locator("#cancel-button").count() == 0  # not offered...
    assert "only its owner or an admin" in other.inner_text("#log-hidden")
    status, text = other.evaluate(
        """async (id) => {
             const csrf = document.querySelector("input[name=csrf]").value;
             const r = await fetch(`/jobs/${id}/cancel`, {method: "POST",
               headers: {"Content-Type": "application/x-www-form-urlencoded"},
               body: "csrf=" + encodeURIComponent(csrf)});
             return [r.status, await r.text()];
           }""", jobs["running"])
    assert status == 403 and "only its owner or an admin may change it" in text  # ...nor done
    shot(other, tmp_path, "refused-job-page")
    assert stack.job(jobs["running"]).state == "running"

    page.goto(f"{d['url']}/jobs/{jobs['running']}")
    page.click("#cancel-button")
    page.wait_for_selector("#said")
    stack.wait_state(jobs["running"], "cancelled")
    shot(page, tmp_path, "cancelled")
