"""Per-team quota bookkeeping for one planning pass (pure, stdlib only).

`TeamState` starts from a `TeamView` and is updated as the pass assigns jobs, so later
checks in the same pass see earlier assignments. Check methods return a reason in words,
or None when the job may run; strings are only built on failure.

Per-type caps: `max_chips_by_type` keys may be a full TPU type ("v4-8") or a family
("v4" = the type with its last "-<n>" removed); `running_by_type` is keyed by the hosts'
full TPU type. A cap counts chips on every host type it matches.
"""

from __future__ import annotations

import time

from tpuq.scheduler.views import TeamView
from tpuq.shapes import family


def cap_matches(cap_key: str, tpu_type: str) -> bool:
    return cap_key == tpu_type or cap_key == family(tpu_type)


def clock(ts: float, fmt: str) -> str:
    """Local wall-clock time; the only environment input (TZ) of the policy's strings."""
    return time.strftime(fmt, time.localtime(ts))


class TeamState:
    """Mutable quota counters of one team during one pass."""

    __slots__ = (
        "_blocked",
        "_cap_keys",
        "budget_left",
        "by_cap",
        "by_user",
        "name",
        "running",
        "view",
    )

    def __init__(self, view: TeamView, now: float) -> None:
        self.view = view
        self.name = view.name
        self.running = view.running_chips
        self.by_user: dict[str, int] = dict(view.running_by_user)
        self.by_cap: dict[str, int] = {
            key: sum(n for t, n in view.running_by_type.items() if cap_matches(key, t))
            for key in view.max_chips_by_type
        }
        self.budget_left = view.budget_left
        self._cap_keys: dict[str | None, tuple[str, ...]] = {None: ()}
        self._blocked = self._team_block(now)

    def _team_block(self, now: float) -> str | None:
        """Reasons that hold back every job of the team regardless of its size."""
        v = self.view
        if v.grant_expires_at is not None and now >= v.grant_expires_at:
            return "grant expired"
        if self.budget_left is not None and self.budget_left <= 0:
            return self._budget_words(f"{v.budget_period} budget spent")
        return None

    def _budget_words(self, head: str) -> str:
        if self.view.budget_resets_at is None:
            return head
        return f"{head}, resets {clock(self.view.budget_resets_at, '%a %H:%M')}"

    def blocked(self) -> str | None:
        """Team-wide reason (grant, budget, concurrent chips full), or None."""
        if self._blocked is not None:
            return self._blocked
        if self.budget_left is not None and self.budget_left <= 0:
            # Estimates charged earlier in this pass can use up the budget.
            return self._budget_words(f"{self.view.budget_period} budget spent")
        mx = self.view.max_chips
        if mx is not None and self.running >= mx:
            return f"team {self.name} at {self.running}/{mx} chips"
        return None

    def full(self) -> bool:
        """True when no job of this team can start this pass, whatever its size."""
        return self.blocked() is not None

    def cap_keys(self, host_type: str | None) -> tuple[str, ...]:
        keys = self._cap_keys.get(host_type)
        if keys is None:
            keys = tuple(k for k in self.view.max_chips_by_type if cap_matches(k, host_type or ""))
            self._cap_keys[host_type] = keys
        return keys

    def check(self, user: str, need: int, host_type: str | None, est_hours: float) -> str | None:
        """Reason a job of `user` asking `need` chips on a `host_type` host may not start."""
        reason = self.blocked()
        if reason is not None:
            return reason
        v = self.view
        if v.max_chips is not None and self.running + need > v.max_chips:
            return f"team {self.name} at {self.running}/{v.max_chips} chips, job needs {need}"
        for key in self.cap_keys(host_type):
            used, cap = self.by_cap[key], v.max_chips_by_type[key]
            if used + need > cap:
                return f"team {self.name} at {used}/{cap} {key} chips"
        if v.max_chips_per_user is not None:
            mine = self.by_user.get(user, 0)
            if mine + need > v.max_chips_per_user:
                return f"user {user} at {mine}/{v.max_chips_per_user} chips in team {self.name}"
        if est_hours > 0 and self.budget_left is not None and need * est_hours > self.budget_left:
            return self._budget_words(
                f"needs {need * est_hours:g} chip-hours, {self.budget_left:g} left in "
                f"{v.budget_period} budget"
            )
        return None

    def add(self, user: str, need: int, host_type: str | None, est_hours: float) -> None:
        """Account a job just assigned in this pass."""
        self.running += need
        self.by_user[user] = self.by_user.get(user, 0) + need
        for key in self.cap_keys(host_type):
            self.by_cap[key] += need
        if self.budget_left is not None and est_hours > 0:
            # Unknown estimates (0) are not charged here; the period's real usage is.
            self.budget_left -= need * est_hours
