"""What scripts read is typed: history rows with names and chip counts filled, ISO 8601
times and durations as options take them; `update` says a time limit as `6h`; a repeated
option also takes a comma list; the status synopsis names every option."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import datetime
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.harness import fixture_cmd
from tpuq.cli.status import status
from tpuq.spec import format_duration, parse_duration

ROOT = Path(__file__).resolve().parents[2]


@given(st.integers(min_value=0, max_value=10**12))
def test_a_duration_reads_back_as_the_same_milliseconds(ms):
    text = format_duration(ms / 1000)
    assert re.fullmatch(r"(\d+d)?(\d+h)?(\d+m)?(\d+(\.\d{1,3})?s)?", text) and text
    assert round(parse_duration(text) * 1000) == ms


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
