"""The one spec validator, against arbitrary input: it answers every spec with a clean
spec or one SpecError line, never another exception, and what it accepts is in range."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpuq import spec as spec_mod
from tpuq.spec import SPEC_FIELDS, JobSpec, SpecError

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
                | st.text(max_size=30))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=12)
plausible: dict[str, st.SearchStrategy[Any]] = {
    "command": st.lists(st.text(min_size=1, max_size=20), min_size=0, max_size=4) | json_values,
    "cwd": st.sampled_from(["/tmp", "/", "relative", ""]) | json_values,
    "env": st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
                           st.text(max_size=10), max_size=4) | json_values,
    "owner": st.text(max_size=70) | json_values,
    "team": st.sampled_from(["default", "vision", "a b", "-x", "x" * 65]) | json_values,
    "name": st.none() | st.text(max_size=210) | json_values,
    "priority": st.integers(-2 * 10**6, 2 * 10**6) | json_values,
    "chips": st.none() | st.integers(-2, 5000) | json_values,
    "tpu_type": st.none() | st.sampled_from(["v4-8", "V4", "v5litepod-16", "x" * 40])
    | json_values,
    "stop_signal": st.sampled_from(["SIGTERM", "TERM", "15", "KILL", "SIGUSR1", "x"])
    | json_values,
    "grace_s": st.floats(-10, 10**6) | st.floats() | json_values,
    "time_limit_s": st.none() | st.floats(-10, 10**8) | st.floats() | json_values,
    "max_retries": st.integers(-5, 200) | json_values,
    "requeue_on_preempt": st.booleans() | json_values,
    "tcmalloc": st.booleans() | json_values,
    "session": st.booleans() | json_values,
    "resubmit_of": st.none() | st.integers(-5, 2**64) | json_values,
    "notify": st.none() | st.sampled_from(["end", "fail,preempt", "all", "none", "x", ""])
    | st.text(max_size=12) | json_values,
    "notify_to": st.none() | st.sampled_from(["json://h/p", "mailto://a@b", "x", ""])
    | st.text(max_size=30) | json_values,
    "env_dropped": st.none() | st.lists(st.sampled_from(["TPU_LOAD_LIBRARY", "MEGASCALE_X",
                                                        "1bad", ""]), max_size=3) | json_values,
    "begin_at": st.none() | st.floats() | st.integers(-5, 2**40) | json_values,
    "output": st.none() | st.sampled_from(["/d/%j.out", "rel/%j", "/d/%q", "/d/%", "/d/",
                                           "/d/%%x"]) | st.text(max_size=20) | json_values,
    "option_sources": st.none() | st.dictionaries(
        st.sampled_from(["--chips", "--time", "chips", "--X"]),
        st.sampled_from(["#TPUQ", "command line", "environment", "elsewhere"]), max_size=3)
    | json_values,
}


@st.composite
def specs(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 20)) == 0:
        return draw(json_values)  # not even an object
    fields = draw(st.lists(st.sampled_from(SPEC_FIELDS), unique=True))
    data = {f: draw(plausible[f]) for f in fields}
    for required in ("command", "cwd", "owner", "team"):
        if draw(st.integers(0, 8)):
            data.setdefault(required, {"command": ["/bin/true"], "cwd": "/tmp",
                                       "owner": "alice", "team": "default"}[required])
    if draw(st.integers(0, 10)) == 0:
        data[draw(st.text(max_size=10))] = draw(json_values)
    return data


@SETTINGS
@given(specs())
def test_every_spec_is_accepted_clean_or_refused_in_one_line(data: Any) -> None:
    try:
        spec = JobSpec.from_dict(data)
    except SpecError as e:
        assert "\n" not in str(e) and 0 < len(str(e)) < 300
        return
    assert isinstance(spec.command, list) and spec.command
    assert all(isinstance(w, str) and "\x00" not in w for w in spec.command)
    assert isinstance(spec.env, dict) and all(isinstance(v, str) for v in spec.env.values())
    assert spec.cwd.startswith("/") and 1 <= len(spec.owner) <= spec_mod.MAX_USER
    assert 1 <= len(spec.team) <= spec_mod.MAX_USER
    assert spec.name is None or len(spec.name) <= spec_mod.MAX_NAME
    assert type(spec.priority) is int and abs(spec.priority) <= spec_mod.MAX_PRIORITY
    assert spec.chips is None or (type(spec.chips) is int and 1 <= spec.chips <= spec_mod.MAX_CHIPS)
    assert math.isfinite(spec.grace_s) and 0 <= spec.grace_s <= spec_mod.MAX_GRACE_S
    assert spec.time_limit_s is None or (math.isfinite(spec.time_limit_s)
                                         and 0 < spec.time_limit_s <= spec_mod.MAX_TIME_LIMIT_S)
    assert type(spec.max_retries) is int and 0 <= spec.max_retries <= spec_mod.MAX_RETRIES
    assert type(spec.tcmalloc) is bool and type(spec.requeue_on_preempt) is bool
    assert type(spec.session) is bool
    assert spec.stop_signal.startswith("SIG")
    assert spec.begin_at is None or (math.isfinite(spec.begin_at) and spec.begin_at >= 0)
    assert spec.output is None or (spec.output.startswith("/") and "\x00" not in spec.output)
    assert spec.option_sources is None or all(
        k.startswith("--") and v in spec_mod.SOURCES for k, v in spec.option_sources.items())
