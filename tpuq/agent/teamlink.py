"""The agent's links in the team deployment, beside the database: its Celery consumer
(started again if it stops), the wake-ups rung in the database, job output shipped to
Redis, and users' broker accounts kept in Redis as the database has them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tpuq.agent.attempts.executor import Executor
from tpuq.agent.duties.tickers import Ticker
from tpuq.settings import Settings
from tpuq.state.db import Database

log = logging.getLogger("tpuq.agent")
CONSUMER_CHECK_S = 2.0  # a stopped Celery consumer is started again this soon
ACCOUNTS_SYNC_S = 30.0  # users' broker accounts are back this soon after a Redis restart
SHIP_S = 0.5  # running attempts' new output goes to Redis this often


class TeamLink:
    """`host` is the agent (tpuq.queue.tasks.Host, for the Celery tasks); `wake` what
    a wake-up rung in the database does; `stopping` whether the agent is stopping."""

    def __init__(self, settings: Settings, db: Database, executor: Executor, host: Any,
                 wake: Callable[[], None], stopping: Callable[[], bool]) -> None:
        self.settings = settings
        self.db = db
        self.executor = executor
        self.host = host
        self.wake = wake
        self.stopping = stopping
        self.worker: Any = None  # the Celery worker
        self.listener: Any = None  # wake-ups rung in the database
        self._accounts_refused = False  # this broker account may not manage ACL users

    def start(self) -> list[Ticker]:
        """Consume, listen and ship; the tickers that keep it so (not started)."""
        from tpuq.queue.accounts import open_to_anyone
        from tpuq.state.wakeups import Listener

        if open_to_anyone(self.settings.broker_url):
            log.warning("the broker lets anyone in without a password: every user can read "
                        "every job's output and stop agents' consumers; give its default "
                        "user a password and users their own accounts (docs/security.md)")
        self.consume()
        self.listener = Listener(self.db, self.wake).start()
        return [Ticker("consumer", CONSUMER_CHECK_S, self.consume),
                Ticker("broker-accounts", ACCOUNTS_SYNC_S, self.sync_accounts),
                self._log_shipper()]

    def stop(self) -> None:
        if self.listener is not None:
            self.listener.stop()
        if self.worker is not None:
            self.worker.stop()

    def consume(self) -> None:
        """The Celery worker, started again if it stopped: an admin's `celery control
        shutdown` (or a crash) must not leave the host deaf to its doorbells until a
        restart."""
        from tpuq.queue.worker import HostWorker

        if self.stopping() or (self.worker is not None and self.worker.alive()):
            return
        if self.worker is not None:
            log.warning("the Celery consumer stopped (a remote shutdown?): starting it again")
        # one slot per chip (each a possible 1-chip job) plus room for wake-ups
        self.worker = HostWorker(self.host, self.executor.name,
                                 concurrency=len(self.executor.chips) + 4).start()

    def sync_accounts(self) -> None:
        """Users' broker accounts in Redis as the database has them (queue/accounts.py):
        back within a sync after Redis restarted empty."""
        import redis

        from tpuq.queue import accounts, logstream
        from tpuq.state import broker_accounts

        if self._accounts_refused:
            return
        with self.db.read() as s:
            wanted = broker_accounts.all_accounts(s)
        try:
            made, gone = accounts.sync(logstream.client(self.settings.broker_url), wanted)
        except redis.exceptions.NoPermissionError:
            self._accounts_refused = True
            log.warning("the agents' broker account may not manage ACL users: users' broker "
                        "accounts are not kept in Redis (docs/security.md)")
            return
        except redis.exceptions.ConnectionError as e:
            log.debug("broker accounts not synced, Redis away: %s", e)
            return
        if made or gone:
            log.info("broker accounts: made %s; removed %s", ", ".join(made) or "none",
                     ", ".join(gone) or "none")

    def drop_stream(self, owner: str, job_id: int, attempt: int, worker: int) -> None:
        from tpuq.queue import logstream

        logstream.drop(self.settings.broker_url, owner, job_id, attempt, worker)

    def _log_shipper(self) -> Ticker:
        """Job output into Redis streams, for `tpuq logs` anywhere."""
        from tpuq.queue.logstream import LogShipper

        shipper = LogShipper(self.settings.broker_url)
        log_path = self.executor.log_path

        def ship(spec: Any, final: bool = False) -> None:  # every slice worker has a stream
            shipper.ship(spec.owner, spec.job_id, spec.attempt,
                         log_path(spec.job_id, spec.attempt, spec.worker), final=final,
                         worker=spec.worker)

        def tick() -> None:
            for sup in self.executor.supervisors():
                ship(sup.spec)
            shipper.ship_unfinished()

        def final(sup: Any) -> None:
            ship(sup.spec, final=True)

        self.executor.end_hooks.append(final)
        return Ticker("log-shipper", SHIP_S, tick)
