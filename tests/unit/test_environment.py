from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest

from tpuq import envinputs, jobenv
from tpuq.jobenv import PARTITION_VARS, build_env, helper_env
from tpuq.settings import Settings
from tpuq.shapes import allowed_chip_counts, chip_bounds
from tpuq.spec import SpecError

DEFAULT_TCMALLOC = Settings().tcmalloc_path

BASE = {"PATH": "/usr/bin:/bin", "HOME": "/home/alice", "LANG": "C.UTF-8"}
OTHER_PRELOAD = "/opt/lib/libfoo.so"


def env(exists: Any = lambda path: True, **overrides: Any) -> dict[str, str]:
    """build_env with one attempt's inputs; an override names a field of either
    (the host's `name` is "tpu-a", its `chip_count` 4)."""
    host: dict[str, Any] = {"name": "tpu-a", "base": BASE, "chip_count": 4,
                            "port_base": 9000, "tcmalloc_path": DEFAULT_TCMALLOC}
    attempt: dict[str, Any] = {"job_env": {}, "job_id": 42, "attempt": 3,
                               "checkpoint_dir": "/ckpt/42", "resumed": True, "chips": None,
                               "tcmalloc": True}
    host_fields = {f.name for f in dataclasses.fields(envinputs.HostInputs)}
    for name, value in overrides.items():
        (host if name in host_fields else attempt)[name] = value
    return build_env(envinputs.HostInputs(**host), envinputs.AttemptInputs(**attempt), exists)


def test_base_and_job_env_merged_with_tpuq_vars() -> None:
    e = env(job_env={"WANDB_PROJECT": "x", "TPUQ_JOB_ID": "spoofed"})
    assert e["PATH"] == BASE["PATH"] and e["WANDB_PROJECT"] == "x"
    assert e["TPUQ_JOB_ID"] == "42" and e["TPUQ_ATTEMPT"] == "3"
    assert e["TPUQ_HOST"] == "tpu-a" and e["TPUQ_CHECKPOINT_DIR"] == "/ckpt/42"
    assert e["TPUQ_RESUMED"] == "1"
    assert env(resumed=False)["TPUQ_RESUMED"] == "0"


def test_pythonunbuffered_set_unless_job_set_it() -> None:
    assert env()["PYTHONUNBUFFERED"] == "1"
    assert env(job_env={"PYTHONUNBUFFERED": ""})["PYTHONUNBUFFERED"] == ""


def test_whole_host_sets_no_partition_vars_and_drops_inherited() -> None:
    inherited = {name: "junk" for name in PARTITION_VARS}
    for chips in (None, [0, 1, 2, 3]):
        e = env(base={**BASE, **inherited}, job_env=inherited, chips=chips)
        assert not set(PARTITION_VARS) & set(e)


@pytest.mark.parametrize(
    ("host", "chips", "bounds"),
    [
        (4, [2], "1,1,1"),
        (4, [2, 3], "1,2,1"),
        (8, [5], "1,1,1"),
        (8, [6, 7], "1,2,1"),
        (8, [4, 5, 6, 7], "2,2,1"),
    ],
)
def test_subset_sets_partition_vars(host: int, chips: list[int], bounds: str) -> None:
    e = env(
        chip_count=host,
        chips=list(reversed(chips)),
        job_env={"TPU_VISIBLE_CHIPS": "0"},
    )
    assert e["TPU_VISIBLE_CHIPS"] == ",".join(map(str, chips))
    assert e["TPU_CHIPS_PER_PROCESS_BOUNDS"] == bounds
    assert e["TPU_PROCESS_BOUNDS"] == "1,1,1"
    assert e["ALLOW_MULTIPLE_LIBTPU_LOAD"] == "1"
    assert (
        e["TPU_MESH_CONTROLLER_ADDRESS"] == f"localhost:{e['TPU_MESH_CONTROLLER_PORT']}"
    )
    # libtpu before mid-2022 reads the old names (pytorch/xla #3956): the same values
    assert e["TPU_VISIBLE_DEVICES"] == e["TPU_VISIBLE_CHIPS"]
    assert e["TPU_CHIPS_PER_HOST_BOUNDS"] == bounds and e["TPU_HOST_BOUNDS"] == "1,1,1"
    # JAX before 0.8.1 reads no JAX_COORDINATOR_PORT; the address works in every version
    assert e["JAX_COORDINATOR_ADDRESS"] == f"localhost:{e['JAX_COORDINATOR_PORT']}"
    assert "CLOUD_TPU_TASK_ID" not in e


def _disjoint_layouts(host: int) -> list[list[list[int]]]:
    """Every way to cut the host into aligned blocks of allowed sizes, for port checks."""
    layouts = []
    for size in allowed_chip_counts(host)[:-1]:
        layouts.append([list(range(i, i + size)) for i in range(0, host, size)])
    layouts.append([[0], [1], [2, 3]] + ([[4, 5, 6, 7]] if host == 8 else []))
    return layouts


@pytest.mark.parametrize("host", [4, 8])
def test_ports_distinct_across_disjoint_subsets(host: int) -> None:
    for layout in _disjoint_layouts(host):
        ports = []
        for chips in layout:
            e = env(chip_count=host, chips=chips)
            ports += [e["TPU_PROCESS_PORT"], e["TPU_MESH_CONTROLLER_PORT"]]
        assert len(ports) == len(set(ports)), layout


def test_ports_derived_from_port_base() -> None:
    e = env(chips=[1], port_base=9000)
    assert (e["TPU_PROCESS_PORT"], e["TPU_MESH_CONTROLLER_PORT"]) == ("9002", "9003")
    default = Settings().port_base  # the one default, in Settings
    assert env(chips=[1], port_base=default)["TPU_PROCESS_PORT"] == str(default + 2)


@pytest.mark.parametrize(
    ("host", "chips"), [(4, [0, 1, 2]), (8, [0, 1, 2, 3, 4, 5]), (2, [0])]
)
def test_subset_without_bounds_shape_raises(host: int, chips: list[int]) -> None:
    with pytest.raises(ValueError, match="allowed chip counts"):
        env(chip_count=host, chips=chips)


@pytest.mark.parametrize("chips", [[], [0, 0], [4], [-1]])
def test_invalid_chip_lists_raise(chips: list[int]) -> None:
    with pytest.raises(ValueError):
        env(chips=chips)


def test_chip_bounds_table_and_allowed_counts() -> None:
    assert allowed_chip_counts(4) == (1, 2, 4)
    assert allowed_chip_counts(8) == (1, 2, 4, 8)
    assert allowed_chip_counts(16) == (16,)
    assert [chip_bounds(n, 4) for n in (1, 2, 4)] == ["1,1,1", "1,2,1", "2,2,1"]
    assert [chip_bounds(n, 8) for n in (1, 2, 4, 8)] == [
        "1,1,1",
        "1,2,1",
        "2,2,1",
        "2,4,1",
    ]
    with pytest.raises(ValueError, match="allowed chip counts are 1, 2, 4, 8"):
        chip_bounds(3, 8)


def test_tcmalloc_present_is_preloaded_once_keeping_other_entries() -> None:
    job = {"LD_PRELOAD": f"/old/libtcmalloc_minimal.so.4 {OTHER_PRELOAD}"}
    e = env(
        job_env=job,
        tcmalloc_path="/lib/libtcmalloc.so.4",
        exists={"/lib/libtcmalloc.so.4"}.__contains__,
    )
    assert e["LD_PRELOAD"] == f"/lib/libtcmalloc.so.4:{OTHER_PRELOAD}"


def test_tcmalloc_absent_is_stripped() -> None:
    job = {"LD_PRELOAD": f"{DEFAULT_TCMALLOC}:{OTHER_PRELOAD}"}
    assert env(job_env=job, exists=lambda p: False)["LD_PRELOAD"] == OTHER_PRELOAD
    assert "LD_PRELOAD" not in env(
        base={**BASE, "LD_PRELOAD": DEFAULT_TCMALLOC}, exists=lambda p: False
    )


def test_tcmalloc_disabled_is_stripped_even_when_present() -> None:
    job = {"LD_PRELOAD": DEFAULT_TCMALLOC}
    assert "LD_PRELOAD" not in env(job_env=job, tcmalloc=False)


def test_large_alloc_threshold_default_unless_job_set_it() -> None:
    for tcmalloc, present in itertools.product((True, False), repeat=2):
        e = env(tcmalloc=tcmalloc, exists=lambda p, present=present: present)
        assert e["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"] == "60000000000"
    job = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": "1"}
    assert env(job_env=job)["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"] == "1"


def test_helper_env_has_no_tcmalloc() -> None:
    base = {
        **BASE,
        "LD_PRELOAD": f"{DEFAULT_TCMALLOC} {OTHER_PRELOAD}",
        "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": "6",
    }
    assert helper_env(base) == {**BASE, "LD_PRELOAD": OTHER_PRELOAD}
    assert helper_env({**BASE, "LD_PRELOAD": DEFAULT_TCMALLOC}) == BASE


# ---- what the job takes from the submitting shell (--export) ----------------------------------
SHELL = {"PATH": "/venv/bin:/usr/bin", "OPENBLAS_CORETYPE": "Haswell", "MY_SETTING": "7",
         "SSH_CONNECTION": "1.2.3.4 5 6.7.8.9 22", "TERM": "xterm", "DISPLAY": ":0",
         "TMUX": "/tmp/tmux", "PWD": "/x", "HOME": "/home/a", "TPUQ_USER": "mallory",
         "TPU_VISIBLE_CHIPS": "0", "JAX_PLATFORMS": "cpu", "XDG_SESSION_ID": "3"}


def test_export_all_passes_the_shell_but_its_session_and_what_tpuq_owns() -> None:
    got = jobenv.capture(SHELL, [])
    assert got == {"PATH": "/venv/bin:/usr/bin", "OPENBLAS_CORETYPE": "Haswell",
                   "MY_SETTING": "7", "JAX_PLATFORMS": "cpu"}


def test_export_none_and_a_list_narrow_it() -> None:
    assert jobenv.capture(SHELL, [], "NONE") == {"PATH": "/venv/bin:/usr/bin",
                                                 "JAX_PLATFORMS": "cpu"}
    assert jobenv.capture(SHELL, [], "MY_SETTING,TERM") == {
        "PATH": "/venv/bin:/usr/bin", "JAX_PLATFORMS": "cpu", "MY_SETTING": "7"}, \
        "a session variable stays out even when named"
    assert jobenv.capture(SHELL, ["X=1"], "none")["X"] == "1", "--env adds to any export"
    with pytest.raises(SpecError, match="bad --export"):
        jobenv.capture(SHELL, [], "1BAD")


def test_env_values_may_name_the_attempts_own_variables() -> None:
    e = env(job_env={"CKPT": "$TPUQ_CHECKPOINT_DIR/orbax", "RUN": "${TPUQ_JOB_ID}-${TPUQ_ATTEMPT}",
                     "KEEP": "$HOME and $TPUQ_NOT_A_VARIABLE"})
    assert e["CKPT"] == "/ckpt/42/orbax" and e["RUN"] == "42-3"
    assert e["KEEP"] == "$HOME and $TPUQ_NOT_A_VARIABLE", "tpuq is not a shell"


@pytest.mark.parametrize("host", [4, 8])
def test_each_subset_gets_a_jax_coordinator_port_of_its_own(host: int) -> None:
    for layout in _disjoint_layouts(host):
        ports = [env(chip_count=host, chips=chips)["JAX_COORDINATOR_PORT"]
                 for chips in layout]
        libtpu = [env(chip_count=host, chips=chips)[k] for chips in layout
                  for k in ("TPU_PROCESS_PORT", "TPU_MESH_CONTROLLER_PORT")]
        assert len(set(ports)) == len(ports) and not set(ports) & set(libtpu), layout
    assert "JAX_COORDINATOR_PORT" not in env(chips=None), "the whole host keeps JAX's default"


@pytest.mark.parametrize("host", [4, 8])
def test_each_subset_gets_a_libtpu_metrics_port_of_its_own(host: int) -> None:
    """libtpu's metrics server binds 8431 in every process unless told otherwise: two
    subset jobs at once would crash-loop on "Address already in use"."""
    for layout in _disjoint_layouts(host):
        ports = [env(chip_count=host, chips=chips)["TPU_RUNTIME_METRICS_PORTS"]
                 for chips in layout]
        others = [env(chip_count=host, chips=chips)[k] for chips in layout
                  for k in ("TPU_PROCESS_PORT", "TPU_MESH_CONTROLLER_PORT", "JAX_COORDINATOR_PORT")]
        assert len(set(ports)) == len(ports) and not set(ports) & set(others), layout


TPU_SHELL = {"PATH": "/usr/bin", "TPU_LOAD_LIBRARY": "0", "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
             "TPU_HOST_BOUNDS": "1,1,1", "TPU_WORKER_ID": "0", "TPU_WORKER_HOSTNAMES": "a,b",
             "TPU_SKIP_MDS_QUERY": "1", "TPU_ACCELERATOR_TYPE": "v4-32",
             "TPU_TOPOLOGY": "2x2x4", "TPU_TOPOLOGY_WRAP": "false,false,true",
             "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_COORDINATOR_ADDRESS": "h:8080",
             "TPU_RUNTIME_METRICS_PORTS": "8431", "JAX_COORDINATOR_ADDRESS": "x:1",
             "TPU_LIBRARY_PATH": "/opt/libtpu.so"}


def test_tpu_variables_of_the_shell_are_dropped_and_named_but_the_library_path_kept() -> None:
    got = jobenv.capture(TPU_SHELL, ["TPU_LOAD_LIBRARY=0"])
    assert got == {"PATH": "/usr/bin", "TPU_LIBRARY_PATH": "/opt/libtpu.so"}
    assert jobenv.dropped(TPU_SHELL) == sorted(set(TPU_SHELL) - {"PATH", "TPU_LIBRARY_PATH"})
    e = env(job_env=TPU_SHELL)  # a row written by another hand: the agent drops them too
    assert e["TPU_LIBRARY_PATH"] == "/opt/libtpu.so"
    assert not {k for k in e if jobenv.tpuq_sets_or_clears(k)}


def test_a_multislice_node_gives_each_job_a_single_slice_of_its_own() -> None:
    e = env(host_env=jobenv.single_slice_env("10.0.0.2"),
            job_env={"MEGASCALE_NUM_SLICES": "4"})
    assert (e["MEGASCALE_NUM_SLICES"], e["MEGASCALE_SLICE_ID"],
            e["MEGASCALE_COORDINATOR_ADDRESS"]) == ("1", "0", "10.0.0.2")


def test_bounds_come_from_the_hosts_generation_and_say_their_source() -> None:
    from tpuq.shapes import TABLE, shapes_of

    assert chip_bounds(4, 8, "v6e") == "2,2,1"
    assert 4 not in shapes_of(8, "v5litepod"), "2,2,1 on chips 0-3 does not fit a 4x2 v5e"
    with pytest.raises(ValueError):
        chip_bounds(4, 8, "v5litepod")
    for (gen, size), row in TABLE.items():
        assert row[-1].chips == size and row[-1].verified, (gen, size, "whole host")
        assert all(b.source for b in row), (gen, size)
        assert all(b.verified or "unverified" in b.source for b in row), (gen, size)
    assert {g for g, _ in TABLE} >= {"v4", "v5litepod", "v5p", "v6e", "tpu7x"}
    assert {(g, n) for g, n in TABLE if g in ("v5litepod", "v6e")} >= {
        ("v5litepod", 4), ("v5litepod", 8), ("v6e", 4), ("v6e", 8)}


def test_a_slice_jobs_task_is_told_its_seat() -> None:
    """A slice job's task: its worker, the slice's workers (its row's count before the
    type's) and the slice, from the one Seat its agent was given."""
    from tpuq.shapes import Seat

    e = env(seat=Seat("pod-a", 2, "v4-32"), coordinator_port=8476)
    assert (e[jobenv.WORKER_ID], e[jobenv.NUM_WORKERS], e[jobenv.SLICE]) == ("2", "4", "pod-a")
    assert e[jobenv.COORDINATOR_PORT] == "8476"
    e = env(seat=Seat("pod-b", 1, "", hosts=2))
    assert (e[jobenv.WORKER_ID], e[jobenv.NUM_WORKERS], e[jobenv.SLICE]) == ("1", "2", "pod-b")
