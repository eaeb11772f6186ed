"""1,000 random sequences of faults and restarts against the fleet controller
(tests/fleet/machine.py says what is drawn and what must hold)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from tests.fleet.machine import FleetMachine

EXAMPLES = int(os.environ.get("TPUQ_FLEET_EXAMPLES", "1000"))

TestFleet = FleetMachine.TestCase
TestFleet.settings = settings(max_examples=EXAMPLES, stateful_step_count=10, deadline=None,
                              suppress_health_check=list(HealthCheck), database=None)
