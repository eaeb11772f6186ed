"""Periodic duties of every agent, beside its jobs; each guarded so one failing duty
stops no other.

- `tickers.py`     small guarded periodic duties
- `logkeeper.py`   job logs within budgets: retention, per-user totals, streams, low disk
- `notifier.py`    tells owners what became of their jobs (the outbox's sender)
- `courier.py`     one notification's delivery (Apprise) in a process of its own, where
                   every connection is checked against where notifications may go
"""
