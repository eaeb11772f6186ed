"""`tpuq fleet apply` and `tpuq fleet status` as a person uses them: a wrong file is one
line, a right one is stored and shown; `tpuq status` says what the fleet waits for."""

from __future__ import annotations

import json

import pytest

from tests.harness import Stack

GOOD = """
[[slot]]
name = "v4"
accelerator_type = "v4-8"
runtime_version = "tpu-ubuntu2204-base"
project = "proj"
zone = "us-central2-b"
capacity = "spot"
count = 2
"""


@pytest.fixture
def fleet_stack(tmp_path) -> Stack:
    s = Stack(home=tmp_path / "home")
    yield s
    s.cleanup()


@pytest.mark.parametrize("text, message", [
    ('[[slot]]\nname = "V4"\n', "name: 1-24 lowercase letters"),
    (GOOD.replace('"v4-8"', '"v4-9"'), "unknown TPU type 'v4-9'"),
    (GOOD.replace('"spot"', '"cheap"'), "capacity 'cheap': one of on-demand, spot, reserved"),
    (GOOD + 'valid_for = "2h"\n', "valid_for is a queued resource's window"),
    (GOOD.replace("count = 2", "count = 1000"), "count: a whole number from 0 to 64"),
    (GOOD + "colour = 1\n", "unknown key 'colour'"),
    ("[[slot\n", "not TOML"),
])
def test_a_wrong_fleet_file_is_one_line_and_nothing_is_stored(fleet_stack, tmp_path, text,
                                                              message):
    f = tmp_path / "fleet.toml"
    f.write_text(text)
    r = fleet_stack.tpuq("fleet", "apply", str(f), check=False)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1
    assert not (fleet_stack.home / "tpuq.db").exists()


def test_applied_slots_are_shown_with_what_each_vm_waits_for(fleet_stack, tmp_path):
    f = tmp_path / "fleet.toml"
    f.write_text(GOOD)
    out = fleet_stack.tpuq("fleet", "apply", str(f)).stdout
    assert "v4: 2 x v4-8 spot in proj/us-central2-b (4 chips each)" in out
    assert "added: v4" in out
    status = fleet_stack.tpuq("fleet", "status").stdout
    assert "v4-8 spot, slot 0: waiting for a first create since" in status
    assert "v4-8 spot, slot 1:" in status
    assert "controller: none leads" in status
    data = json.loads(fleet_stack.tpuq("fleet", "status", "--json").stdout)
    assert [m["node"] for m in data["members"]] == ["tpuq-v4-0-g1", "tpuq-v4-1-g1"]
    assert data["costs"][-1]["slot"] == "total"
    queue = fleet_stack.tpuq("status").stdout
    assert "fleet:" in queue and "v4-8 spot, slot 1: waiting for a first create" in queue
    again = fleet_stack.tpuq("fleet", "apply", str(f)).stdout
    assert "unchanged: v4" in again
    usage = fleet_stack.tpuq("usage").stdout
    assert "fleet (chip-hours of its VMs" in usage and "total" in usage
