"""Acting on many jobs at once: `tpuq cancel --mine` says what it will touch and asks,
unless --yes."""

from __future__ import annotations


def test_cancel_mine_by_state_and_name(stack):
    sweep = [stack.submit("--hold", "--name", f"sweep-{i}", "--", "/bin/true") for i in range(3)]
    other = stack.submit("--hold", "--name", "keep-me", "--", "/bin/true")
    r = stack.tpuq("cancel", "--mine", "--name", "sweep-*", check=False)
    assert r.returncode == 2 and "add --yes" in r.stderr, "no terminal: it does not guess"
    assert all(stack.job(j).state == "held" for j in sweep)
    r = stack.tpuq("cancel", "--mine", "--name", "sweep-*", "--yes")
    assert f"3 jobs of tester: {sweep[0]} (sweep-0, held)" in r.stderr
    assert [stack.job(j).state for j in sweep] == ["cancelled"] * 3
    assert stack.job(other).state == "held"
    r = stack.tpuq("cancel", "--mine", "--state", "queued", "-y")
    assert "no job of yours matches" in r.stderr and stack.job(other).state == "held"
    r = stack.tpuq("cancel", "--state", "held", check=False)
    assert r.returncode == 2 and "add --mine" in r.stderr
