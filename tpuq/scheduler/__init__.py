"""Who runs where: a pure policy, and the leader's pass that applies it.

- `views.py`      what the policy sees and decides (plain frozen values)
- `policy.py`     plan(): filters, order, placement, waiting reasons
- `fairshare.py`  the order: team fair share, priority, age
- `hostpool.py`   free aligned chip blocks, best fit
- `slicepool.py`  multi-host slices: all workers of a free slice, or nothing
- `quota.py`      per-team quota counters during one pass
- `forecast.py`   when each queued job should start: the plan run forward in time
- `passes.py`     the leader's pass: snapshot -> plan -> assign -> dispatch; its lease
- `reaper.py`     the leader's reaper: requeue the jobs of hosts whose leases ran out
"""
