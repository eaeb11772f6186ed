"""Shape probes, pure parts: which command, what a result withholds, and what the
scheduler then offers."""

from __future__ import annotations

from tpuq.agent.tpu.probes import Result, command_of, unprobed, withheld
from tpuq.scheduler.hostpool import WHOLE, Pool
from tpuq.scheduler.views import HostView
from tpuq.shapes import shapes_of


def test_auto_probes_real_tpu_hosts_with_jax_and_nothing_else() -> None:
    argv = command_of("auto", real_tpu=True)
    assert argv is not None and argv[:2] == ["python3", "-c"] and "local_devices" in argv[2]
    assert command_of("auto", real_tpu=False) is None, "fake devices: nothing to ask JAX"
    assert command_of("off", real_tpu=True) is None
    assert command_of("/opt/venv/bin/python /opt/probe.py", real_tpu=False) == [
        "/opt/venv/bin/python", "/opt/probe.py"]


def test_a_failed_probe_withholds_its_shape_with_the_error() -> None:
    table = shapes_of(8, "v6e")
    got = withheld([Result(1, None), Result(2, "bounds refused"), Result(4, None),
                    Result(8, None)], table, "p")
    assert got == {"2": "probe failed: bounds refused"}


def test_a_probe_without_jax_proves_nothing_so_only_verified_shapes_are_offered() -> None:
    table = shapes_of(8, "v6e")
    missing = "ModuleNotFoundError: No module named 'jax'"
    got = withheld([Result(n, missing) for n in table], table, "p")
    assert set(got) == {"2"}, "1, 4 and 8 chips are verified on v6e-8; 2 is not"
    assert "TPUQ_PROBE_COMMAND" in got["2"]


def test_without_probes_a_known_generation_offers_its_verified_shapes_only() -> None:
    got = unprobed(shapes_of(8, "v5litepod"), 8, "v5litepod")
    assert "4" in got and "no bounds known" in got["4"], "4x2 v5e: 2,2,1 is not its shape"
    assert "2" in got and "unverified" in got["2"]
    assert unprobed(shapes_of(4), 4, None) == {}, "a host of no known generation: its table"
    assert unprobed(shapes_of(4, "v5litepod"), 4, "v5litepod", real_tpu=False) == {}, \
        "fake devices whose metadata names a type: no real chips to be wrong about"


def test_the_scheduler_offers_neither_withheld_shapes_nor_a_withheld_whole_host() -> None:
    host = HostView("h", "v6e-8", tuple(range(8)), frozenset(range(8)),
                    withheld=frozenset({2, 8}))
    pool = Pool([host])
    assert pool.has_room("v6e-8", 1) and pool.has_room("v6e-8", 4)
    assert not pool.has_room("v6e-8", 2) and not pool.has_room("v6e-8", WHOLE)
