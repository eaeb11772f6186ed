"""Small independent periodic duties (heartbeat, reaper, busy check, ...).

Each runs in its own thread and is guarded, so one failing duty (a database blip, a bug)
is logged and retried on the next tick without stopping the others.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tpuq.state.outage import is_outage

log = logging.getLogger("tpuq.agent")


class Ticker:
    def __init__(self, name: str, interval_s: float, duty: Callable[[], object]) -> None:
        self.name = name
        self.interval_s = interval_s
        self.duty = duty
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tick-{name}", daemon=True)

    def start(self) -> Ticker:
        self._thread.start()
        return self

    def wake(self) -> None:
        """Run the duty now instead of at the next tick."""
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self.duty()
                failures = 0
            except Exception as e:  # noqa: BLE001 - a duty must never kill its ticker
                failures += 1
                if is_outage(e):
                    log.warning("%s: database unavailable (%d in a row): %s", self.name,
                                failures, str(e).splitlines()[0][:200])
                else:
                    log.exception("%s failed (%d in a row); retrying", self.name, failures)
            # back off while failing so a dead database is not hammered
            self._wake.wait(self.interval_s * min(2**failures, 8))
            self._wake.clear()
