"""A fleet controller on a real database, talking through the real google-cloud-tpu
client to the fake Cloud TPU API (in-process, or over HTTP on loopback)."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from tests.fakes.tpu_api import FakeCloud
from tests.fakes.tpu_http import mount
from tests.fleet.memory import DirectApi, MemoryRecords
from tpuq.fleet import spec as fleet_spec
from tpuq.fleet import store
from tpuq.fleet.controller import Boot, Controller
from tpuq.fleet.gcp import GoogleTpuApi, make_client
from tpuq.fleet.records import DbRecords
from tpuq.settings import Settings
from tpuq.state.db import Database

BOOT = Boot(script="#!/bin/sh\n# workers/startup-script.sh\n", database_url="postgresql://db",
            broker_url="redis://broker")
FAST = Settings(fleet_backoff_s=30.0, fleet_backoff_max_s=600.0, fleet_join_s=300.0,
                leader_lease_s=30.0)


def slot(name: str = "v4", **kw: Any) -> fleet_spec.SlotSpec:
    base = dict(name=name, accelerator_type="v4-8", runtime_version="tpu-ubuntu2204-base",
                project="proj", zone="us-central2-b", capacity="spot", count=1)
    return fleet_spec.SlotSpec(**{**base, **kw})


_client: dict[str, Any] = {}


def in_process_api(cloud: FakeCloud, timeout_s: float = 5.0) -> GoogleTpuApi:
    """The real client, answered by `cloud` in-process. One client for the whole run
    (made once: building one reads credentials, environment and endpoints each time)."""
    if "client" not in _client:
        _client["client"] = make_client("http://127.0.0.1:9")
        _client["adapter"] = mount(_client["client"], cloud)
    _client["adapter"].cloud = cloud
    return GoogleTpuApi(_client["client"], timeout_s=timeout_s)


def controller(db: Database, cloud: FakeCloud, holder: str = "c1", seed: int = 0,
               settings: Settings = FAST) -> Controller:
    """A controller on the database, through the real client, on the fake's clock."""
    return Controller(DbRecords(db, settings, holder), settings, in_process_api(cloud), BOOT,
                      rng=random.Random(seed), clock=lambda: cloud.now)


def memory_controller(records: MemoryRecords, cloud: FakeCloud, seed: int = 0) -> Controller:
    """The same step on records in memory and the fake called directly."""
    return Controller(records, FAST, DirectApi(cloud), BOOT, rng=random.Random(seed),
                      clock=lambda: cloud.now)


def apply(db: Database, *slots: fleet_spec.SlotSpec, prefix: str = "tpuq") -> store.Applied:
    with db.write() as s:
        return store.apply(s, fleet_spec.FleetFile(prefix, tuple(slots)), "admin")


def members(db: Database) -> list[Any]:
    with db.read() as s:
        return store.members(s)


def replace(spec: fleet_spec.SlotSpec, **kw: Any) -> fleet_spec.SlotSpec:
    return dataclasses.replace(spec, **kw)

