"""What scripts read is typed: history rows and status/show job objects with names and
chip counts filled, ISO 8601 times and durations as options take them, every key the
reference documents of the type it says; `update` says a time limit as `6h`; a repeated
option also takes a comma list; the status synopsis names every option."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.harness import fixture_cmd
from tests.unit.test_contract import section, tables
from tpuq.cli.status import status
from tpuq.jobjson import epoch, iso_time
from tpuq.spec import format_duration, parse_duration

ROOT = Path(__file__).resolve().parents[2]


@given(st.integers(min_value=0, max_value=10**12))
def test_a_duration_reads_back_as_the_same_milliseconds(ms):
    text = format_duration(ms / 1000)
    assert re.fullmatch(r"(\d+d)?(\d+h)?(\d+m)?(\d+(\.\d{1,3})?s)?", text) and text
    assert round(parse_duration(text) * 1000) == ms


@given(st.floats(min_value=0, max_value=2.0**36, allow_nan=False))
def test_a_time_is_iso_8601_in_utc_to_the_second_and_reads_back(t):
    text = iso_time(t)
    assert text == datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")
    assert epoch(text) == math.floor(t) and epoch(text.replace("+00:00", "Z")) == epoch(text)
    assert iso_time(None) is None and epoch(None) is None and epoch(t) == t


def test_durations_read_as_people_write_them():
    assert [format_duration(s) for s in (0, 0.5, 90, 3600, 5400, 21600, 90061.25)] == \
        ["0s", "0.5s", "1m30s", "1h", "1h30m", "6h", "1d1h1m1.25s"]


def test_history_rows_are_filled_and_typed(stack, host):
    stack.start_agent(host)
    whole = stack.submit("--", "/bin/true")  # unnamed, the whole host
    named = stack.submit("--chips", "1", "--name", "probe", "--", "sleep", "0.3")
    stack.wait_all([whole, named], "succeeded")
    rows = {r["id"]: r for r in json.loads(stack.tpuq("history", "--json").stdout)}
    assert rows[whole]["name"] == "true" and rows[named]["name"] == "probe"
    assert (rows[whole]["chips"], rows[whole]["whole_host"]) == (host.chips, True)
    assert (rows[named]["chips"], rows[named]["whole_host"]) == (1, False)
    for job_id, r in rows.items():
        ended = datetime.fromisoformat(r["ended_at"])
        assert ended.utcoffset() is not None and ended.utcoffset().total_seconds() == 0
        assert abs(ended.timestamp() - stack.job(job_id).ended_at) < 1
        assert datetime.fromisoformat(r["submitted_at"]) <= ended
    assert parse_duration(rows[named]["runtime"]) >= 0.3
    parsed = {int(r["id"]): r for r in
              csv.DictReader(io.StringIO(stack.tpuq("history", "--csv").stdout))}
    assert parsed[whole]["chips"] == str(host.chips) and parsed[whole]["name"] == "true"
    assert parsed[named]["ended_at"] == rows[named]["ended_at"]
    assert parsed[named]["runtime"] == rows[named]["runtime"]
    (mine,) = json.loads(stack.tpuq("usage", "--json").stdout)
    assert mine["jobs"] == 2 and parse_duration(mine["runtime"]) >= 0.3


def _is_time(v):
    if not isinstance(v, str):
        return False
    at = datetime.fromisoformat(v)
    return at.utcoffset() is not None and at.utcoffset().total_seconds() == 0


def _is_duration(v):
    return isinstance(v, str) and format_duration(parse_duration(v)) == v


KINDS = {"integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
         "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
         "time": _is_time, "duration": _is_duration, "object": lambda v: isinstance(v, dict),
         "list of strings": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
         "list of integers": lambda v: isinstance(v, list) and all(isinstance(x, int) for x in v),
         "list of objects": lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
         "list of pairs": lambda v: isinstance(v, list) and all(len(x) == 2 for x in v)}


def _documented(rows):
    """{key: (its type's check, null allowed)} of a reference table."""
    out = {}
    for key, kind, _ in rows:
        base, nullable = (kind[:-len(" or null")], True) if kind.endswith(" or null") \
            else (kind, False)
        out[key.strip("`")] = (KINDS[base], nullable)
    return out


def _check(obj, documented, where):
    for key, (ok, nullable) in documented.items():
        if key not in obj:  # the optional keys (`worker_list`, `tasks`...) may be absent
            continue
        v = obj[key]
        assert (v is None and nullable) or (v is not None and ok(v)), (where, key, v)


def test_status_and_show_json_are_the_documented_contract(stack, host, tmp_path):
    """Every key the reference documents, of the type it says, in real output: times ISO
    8601 in UTC, durations as options take them, names and whole-host chips filled."""
    every, starts, show = (_documented(t) for t in tables(section("The JSON contract")))
    stack.start_agent(host)
    gate = tmp_path / "gate"
    whole = stack.submit("--time", "1h30m", "--grace", "45s",
                         *fixture_cmd("wait_file.py", gate))  # unnamed, the whole host
    stack.wait_process(whole)
    later = stack.submit("--chips", "1", "--name", "later", "--begin", "+2h", "--", "/bin/true")
    listed = {j["id"]: j for j in json.loads(stack.tpuq("status", "--json").stdout)}
    for j in listed.values():
        assert set(every) <= set(j), set(every) - set(j)
        _check(j, every, "status")
    w, lt = listed[whole], listed[later]
    assert (w["name"], w["chips"], w["whole_host"]) == ("wait_file.py", host.chips, True)
    assert (lt["name"], lt["chips"], lt["whole_host"]) == ("later", 1, False)
    assert (w["time_limit"], w["grace"], lt["time_limit"]) == ("1h30m", "45s", None)
    job = stack.job(whole)
    assert abs(datetime.fromisoformat(w["submitted_at"]).timestamp() - job.submitted_at) < 1
    assert w["started_at"] is not None and w["ended_at"] is None
    begin = datetime.fromisoformat(lt["begin_at"]).timestamp()
    assert abs(begin - stack.job(later).begin_at) < 1
    (q,) = json.loads(stack.tpuq("status", "--start", "--json").stdout)
    _check(q, {**every, **starts}, "status --start")
    assert q["id"] == later and "position" in q
    for job_id in (whole, later):
        shown = json.loads(stack.tpuq("show", str(job_id), "--json").stdout)
        assert set(every) | {k for k in show if k not in ("worker_list", "array_tasks")} \
            <= set(shown)
        _check(shown, {**every, **show}, "show")
        assert {k: shown[k] for k in ("name", "chips", "whole_host", "time_limit")} == \
            {k: listed[job_id][k] for k in ("name", "chips", "whole_host", "time_limit")}
        for a in shown["attempt_list"]:
            assert all(a[k] is None or _is_time(a[k])
                       for k in ("started_at", "ended_at", "checkpoint_at", "eta_at")), a
        assert all(_is_time(e["at"]) for e in shown["events"]), shown["events"]
    gate.touch()
    stack.wait_state(whole, "succeeded")
    shown = json.loads(stack.tpuq("show", str(whole), "--json").stdout)
    assert datetime.fromisoformat(shown["ended_at"]) >= \
        datetime.fromisoformat(shown["submitted_at"])
    info = subprocess.run(  # the Python API's Job.info(): the same object
        [sys.executable, "-c", "import json, sys; from tpuq.client import Job; "
         f"print(json.dumps(Job({whole}).info()))"], env=stack.env(), capture_output=True,
        text=True, check=True, timeout=60).stdout
    assert json.loads(info) == shown
    stack.tpuq("cancel", str(later))


def test_a_whole_host_job_that_never_ran_has_no_chip_count(stack):
    job = stack.submit("--", "/bin/true")  # no host: it waits, then is cancelled
    stack.tpuq("cancel", str(job))
    (row,) = json.loads(stack.tpuq("history", "--json").stdout)
    assert (row["id"], row["chips"], row["whole_host"]) == (job, None, True)


def test_a_repeated_option_takes_a_comma_list(stack, tmp_path):
    queued = stack.submit("--chips", "1", *fixture_cmd("wait_file.py", tmp_path / "g"))
    held = stack.submit("--hold", "--", "/bin/true")
    ids = [stack.tpuq("status", "--json", *args).stdout for args in
           (("--state", "queued,held"), ("--state", "queued", "--state", "held"))]
    assert [sorted(j["id"] for j in json.loads(out)) for out in ids] == [[queued, held]] * 2
    only = json.loads(stack.tpuq("status", "--json", "--state", "held").stdout)
    assert [j["id"] for j in only] == [held]
    for bad, said in (("queued,bogus", "'bogus' is not one of"), ("queued,", "an empty item")):
        r = stack.tpuq("status", "--state", bad, check=False)
        assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr
    stack.tpuq("cancel", "--mine", "--state", "queued,held", "-y")
    stack.wait_all([queued, held], "cancelled")
    ended = json.loads(stack.tpuq("history", "--json", "--state", "cancelled,failed").stdout)
    assert sorted(r["id"] for r in ended) == [queued, held]


def test_update_says_a_time_limit_as_options_take_it(stack):
    job = stack.submit("--hold", "--", "/bin/true")
    r = stack.tpuq("update", str(job), "--time", "1h30m")
    assert f"job {job}: updated: time_limit 1h30m" in r.stdout
    assert stack.job(job).time_limit_s == 5400.0


def test_the_status_synopsis_names_every_option():
    options = [p for p in status.params if p.name != "help" and getattr(p, "opts", None)]
    synopsis = (status.help or "").split("\b", 1)[1].split("\n\n")[0]
    using = (ROOT / "docs" / "using.md").read_text()
    manual = using.split("## Reading the queue: `tpuq status`", 1)[1].split("```")[1]
    for text in (synopsis, manual):
        words = set(re.findall(r"(?<![\w-])(--?[\w-]+)", text))
        missing = [p.opts[-1] for p in options if not words & set(p.opts)]
        assert not missing, f"not in the synopsis: {missing}"


def test_per_type_caps_take_a_comma_list(stack):
    stack.tpuq("quota", "set", "vision", "--max-chips-type", "v4=8,v5litepod=4")
    (team,) = json.loads(stack.tpuq("quota", "--json").stdout)
    assert team["max_chips_by_type"] == {"v4": 8, "v5litepod": 4}
    r = stack.tpuq("quota", "set", "vision", "--max-chips-type", "v4=8,v5e", check=False)
    assert r.returncode == 2 and "bad --max-chips-type 'v5e': expected TYPE=N" in r.stderr
