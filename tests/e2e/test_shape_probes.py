"""Every chip shape a host offers is proven on it: a shape whose probe fails is not
offered (status says why), and the shapes are proven again when the Python, JAX or
libtpu the probe uses changes."""

from __future__ import annotations

import json
import sys

from tests.harness import FIXTURES


def test_a_shape_whose_probe_fails_is_not_offered_until_a_probe_passes(stack, host, tmp_path):
    record, runtime = tmp_path / "probes.jsonl", tmp_path / "libtpu.so"
    runtime.write_text("old\n")
    probe = f"{sys.executable} {FIXTURES / 'fake_probe.py'} {record} {runtime}"
    agent = stack.start_agent(host, TPUQ_PROBE_COMMAND=probe)
    seen = {len(e["TPUQ_PROBE_CHIPS"].split(",")): e
            for e in map(json.loads, record.read_text().splitlines())}
    assert sorted(seen) == [1, 2, 4], "every shape of a 4-chip host is probed"
    # ...in exactly the environment a job of that shape gets
    assert (seen[2]["TPU_VISIBLE_CHIPS"], seen[2]["TPU_CHIPS_PER_PROCESS_BOUNDS"]) == ("0,1", "1,2,1")
    assert "TPU_RUNTIME_METRICS_PORTS" in seen[2] and "TPU_VISIBLE_CHIPS" not in seen[4]

    status = stack.tpuq("status").stdout
    assert "2-chip jobs unavailable: probe failed" in status and "1,2,1 does not fit" in status
    pair = stack.submit("--chips", "2", "--", "/bin/true")
    single = stack.submit("--chips", "1", "--", "/bin/true")
    stack.wait_state(single, "succeeded")
    assert stack.job(pair).state == "queued", "no job lands on a shape that failed its probe"

    runtime.write_text("new\n")  # an upgrade of what the probe loaded
    stack.wait_state(pair, "succeeded", timeout=60)
    assert stack.host(host.name).unavailable is None
    assert "shape probe" in agent.log_since_start()

    agent.stop()
    runs = len(record.read_text().splitlines())
    stack.start_agent(host, TPUQ_PROBE_COMMAND=probe)
    job = stack.submit("--chips", "2", "--", "/bin/true")
    stack.wait_state(job, "succeeded")
    assert len(record.read_text().splitlines()) == runs, "nothing changed: nothing probed"

