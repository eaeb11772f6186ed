"""A batch submit's entries are anything a local user sends until the handler checks
them (`_batch_entry`): each fault is a SpecError, one line, before anything is written."""

from __future__ import annotations

import base64

import pytest

from tpuq.api.handlers import _batch_entry
from tpuq.spec import SpecError

COMMON = {"command": ["/bin/true"], "cwd": "/", "team": "default", "env": {"PATH": "/bin"}}


def test_a_well_formed_entry_takes_the_common_fields_and_the_callers_name():
    e = _batch_entry(COMMON, {"spec": {"name": "a"}, "held": True, "after": [3]}, "alice")
    assert (e.spec.owner, e.spec.name, e.spec.command, e.held, e.after) == \
        ("alice", "a", ["/bin/true"], True, [3])
    assert _batch_entry(COMMON, {"spec": {"owner": "mallory"}}, "alice").spec.owner == "alice"


@pytest.mark.parametrize("job, says", [
    ({"spec": [], "held": False}, "a batch job is"),
    ({"held": "yes"}, "a batch job is"),
    ({"function": 12}, "a batch job is"),
    ({"after": "3"}, "after must be a list"),
    ({"after": ["3"]}, "after: job ids"),
    ({"after_any": [True]}, "after_any: job ids"),
    ({"after": [2**63]}, "after: job ids"),
    ({"nope": 1}, "unknown fields of a batch job: nope"),
    ({"spec": {"priority": "high"}}, "--priority must be a whole number"),
    ({"spec": {"bogus": 1}}, "unknown job fields"),
    ({"function": "%%%"}, "a function job's command is"),
])
def test_a_hostile_entry_is_one_line(job, says):
    with pytest.raises(SpecError) as e:
        _batch_entry(COMMON, job, "alice")
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_function_entry_must_be_a_function_jobs_command_and_base64():
    fn = {"command": ["/usr/bin/python3", "-m", "tpuq.runfn"]}
    with pytest.raises(SpecError, match="not base64"):
        _batch_entry({**COMMON, **fn}, {"function": "%%%"}, "alice")
    ok = _batch_entry({**COMMON, **fn}, {"function": base64.b64encode(b"x").decode()}, "alice")
    assert ok.function == b"x"
