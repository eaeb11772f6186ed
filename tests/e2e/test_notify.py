"""A job tells its owner what became of it: through a chat webhook and by e-mail, once per
event, retried when the destination fails, given up (and shown) after the tries allowed,
and for preemptions only once they exceed TPUQ_NOTIFY_PREEMPTS. The sender is each
agent's; the destinations are real servers on loopback, which a deployment refuses
unless its configuration allows it (TPUQ_NOTIFY_ALLOW): these agents do."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.fakes.receivers import smtp_sink, webhook
from tests.harness import wait_for
from tests.services import free_port

LOOPBACK = {"TPUQ_NOTIFY_ALLOW": "127.0.0.1"}  # where the test's receivers listen
FAST = {"TPUQ_NOTIFY_POLL_S": "0.1", "TPUQ_NOTIFY_RETRY_S": "0.1", **LOOPBACK}


def notes(stack, job_id: int) -> list[dict]:  # type: ignore[no-untyped-def]
    return json.loads(stack.tpuq("show", "--json", str(job_id)).stdout)["notifications"]


def test_each_event_reaches_a_chat_webhook_and_a_mailbox_exactly_once(stack, host):
    stack.start_agent(host, **FAST)
    with webhook() as (hook, hport), smtp_sink() as (mail, mport):
        chat = f"mmost://127.0.0.1:{hport}/abcdefghijklmnop"
        email = f"mailto://127.0.0.1:{mport}?from=tpuq@example.org&to=alice@example.org"
        failed = stack.submit("--notify", "fail", "--notify-to", chat, "--notify-to", email,
                              "--name", "prep", "--", "sh", "-c", "exit 3")
        quiet = stack.submit("--notify", "fail", "--notify-to", chat, "--", "/bin/true")
        stack.wait_all([failed, quiet], "failed", "succeeded")
        # the job's own destination for `end`, set in its submitter's configuration
        done = stack.submit("--", "/bin/true", TPUQ_NOTIFY="end", TPUQ_NOTIFY_TO=chat)
        stack.wait_state(done, "succeeded")
        first, second = hook.wait(2)
        assert first["path"] == "/hooks/abcdefghijklmnop"  # Mattermost's incoming webhook
        assert f"job {failed} prep failed" in first["body"]["text"]
        assert "exit: 3" in first["body"]["text"]
        assert f"job {done} true succeeded" in second["body"]["text"]
        (letter,) = mail.wait(1)
        assert letter["to"] == ["alice@example.org"]
        assert letter["subject"] == f"tpuq: job {failed} prep failed"
        assert f"tpuq logs {failed}" in letter["text"]
        wait_for(lambda: [n["state"] for n in notes(stack, done)] == ["sent"],
                 what="the last notification recorded as sent")
        assert len(hook.items) == 2 and len(mail.items) == 1, "each event told once"
        assert notes(stack, quiet) == [], "a job that succeeded is no `fail` event"
        assert [n["state"] for n in notes(stack, failed)] == ["sent"]


def test_a_failing_destination_is_retried_then_given_up_and_shown(stack, host):
    agent = stack.start_agent(host, TPUQ_NOTIFY_TRIES="3", **FAST)
    with webhook() as (hook, hport):
        hook.refuse = 2  # down twice, then up
        flaky = stack.submit("--notify-to", f"json://127.0.0.1:{hport}/tpuq", "--", "/bin/true")
        (got,) = hook.wait(1)
        assert got["body"]["title"] == f"tpuq: job {flaky} true succeeded"
        wait_for(lambda: notes(stack, flaky)[0]["state"] == "sent", what="sent on try 3")
        assert notes(stack, flaky)[0]["tries"] == 3
    closed = f"mailto://127.0.0.1:{free_port()}?from=tpuq@example.org&to=alice@example.org"
    lost = stack.submit("--notify-to", closed, "--", "/bin/true")
    wait_for(lambda: notes(stack, lost)[0]["state"] == "failed", what="given up")
    assert notes(stack, lost)[0]["tries"] == 3
    shown = stack.tpuq("show", str(lost)).stdout
    assert "succeeded  FAILED after 3 tries: mailto://: " in shown
    wait_for(lambda: f"job {lost} succeeded): given up after 3 tries" in agent.log_tail(),
             what="the agent's log line")
    assert f"127.0.0.1:{closed.split(':')[2]}" not in agent.log_tail(), \
        "a destination is named by its scheme only"


def test_preemptions_are_told_once_they_exceed_the_threshold(stack, host):
    stack.start_agent(host, TPUQ_NOTIFY_PREEMPTS="1", **FAST)
    with webhook() as (hook, hport):
        job = stack.submit("--notify", "preempt,end", "--notify-to",
                           f"json://127.0.0.1:{hport}/p", "--", "sleep", "600")
        for attempt in (1, 2, 3):
            wait_for(lambda n=attempt: stack.job(job).attempt == n  # type: ignore[misc]
                     and stack.job(job).state == "running", what=f"attempt {attempt} running")
            if attempt < 3:
                stack.tpuq("preempt", str(job))
        (told,) = hook.wait(1)
        assert told["body"]["title"].endswith(": preempted 2 times")
        stack.tpuq("cancel", str(job))
        _, end = hook.wait(2)
        assert end["body"]["title"] == f"tpuq: job {job} sleep cancelled"
        wait_for(lambda: [n["state"] for n in notes(stack, job)]
                 == ["skipped", "sent", "sent"], what="one skipped, two sent")
        assert len(hook.items) == 2


def test_a_bad_notify_option_is_one_line_at_submit(stack, host):
    for args, says in [
        (("--notify", "fial"), "--notify 'fial': one or more of end, fail, preempt"),
        (("--notify", "fail"), "--notify fail: to where? Give --notify-to URL"),
        (("--notify-to", "hooks.slack.com/x"), "--notify-to 'hooks.slack.com/x': a "
                                               "notification URL such as"),
    ]:
        r = stack.tpuq("submit", *args, "--", "/bin/true", check=False)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_destination_on_the_host_or_link_local_is_refused_at_submit(stack, host):
    """By default: nothing on the host itself, nothing link-local (the metadata server),
    however the address is written; one line each, nothing queued."""
    stack.start_agent(host)
    for url, says in [
        ("json://127.0.0.1:9/hook", "json://127.0.0.1: 127.0.0.1 is a loopback address"),
        ("mmost://localhost:8065/tok", "mmost://localhost: localhost resolves to 127.0.0.1, a "
                                       "loopback address"),
        ("json://2130706433/x", "json://2130706433: 2130706433 resolves to 127.0.0.1, a "
                                "loopback address"),
        ("json://[::ffff:127.0.0.1]:9/x", "resolves to 127.0.0.1, a loopback address"),
        ("json://169.254.169.254/computeMetadata/v1/", "169.254.169.254 is a link-local "
                                                       "address (where the metadata server"),
        ("mailto://user:hunter2@0.0.0.0:25", "0.0.0.0 is a loopback address"),
    ]:
        r = stack.tpuq("submit", "--notify-to", url, "--", "/bin/true", check=False)
        assert r.returncode == 2, r.stderr
        (line,) = r.stderr.splitlines()
        assert says in line and "unless an admin allows it (notify_allow" in line, line
        assert "hunter2" not in line
    assert stack.job_count() == 0
    # a token is no host: it is not looked up, and the sender's own check decides
    stack.submit("--notify-to", "slack://TokenA/TokenB/TokenC", "--", "/bin/true")


def test_no_destination_reaches_a_log(stack, host):
    """Apprise names a URL it cannot load in full; a refused password is the user's: none
    of it reaches the agent's log, `tpuq show` or the notification's record."""
    agent = stack.start_agent(host, TPUQ_NOTIFY_TRIES="1", **FAST)
    job = stack.submit("--notify-to", "discord://SECRETID4711",
                       "--notify-to", f"mailto://alice:hunter2@127.0.0.1:{free_port()}"
                       "?from=tpuq@example.org&to=alice@example.org", "--", "/bin/true")
    wait_for(lambda: [n["state"] for n in notes(stack, job)] == ["failed"], what="given up")
    wait_for(lambda: f"job {job} succeeded): given up after 1 tries" in agent.log_tail(),
             what="the agent's log line")
    shown = stack.tpuq("show", str(job)).stdout + json.dumps(notes(stack, job))
    for secret in ("SECRETID4711", "hunter2"):
        assert secret not in agent.log_since_start(), agent.log_since_start()
        assert secret not in shown, shown
    assert "discord://: not a notification URL Apprise knows" in shown


def courier(url: str, allow: str = "") -> dict:  # type: ignore[type-arg]
    """What the agent's courier process answers for one delivery."""
    order = {"deliveries": [{"url": url, "title": "t", "body": "b", "kind": "info"}],
             "allow": allow, "own": []}
    done = subprocess.run([sys.executable, "-m", "tpuq.agent.duties.courier"],
                          input=json.dumps(order), capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_the_sender_checks_every_address_it_connects_to():
    """What the submit cannot see (a name that resolves to loopback at send time, a
    redirect from an allowed address to another) the sending process refuses at connect."""
    with webhook() as (hook, port), webhook("127.0.0.2") as (elsewhere, other):
        assert courier(f"json://localhost:{port}/x") == {
            "error": "refused to connect to 127.0.0.1: a loopback address (this host itself) "
                     "(notify_allow)"}
        assert courier(f"json://localhost:{port}/x", allow="127.0.0.1") == {"ok": True}
        assert hook.wait(1)[0]["path"] == "/x"
        hook.redirect = f"http://127.0.0.2:{other}/stolen"
        said = courier(f"json://127.0.0.1:{port}/y", allow="127.0.0.1/32")
        assert said == {"error": "refused to connect to 127.0.0.2: a loopback address (this "
                                 "host itself) (notify_allow)"}
        assert elsewhere.items == [], "the redirect went nowhere"
