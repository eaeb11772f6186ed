"""The metrics /metrics serves, pinned: tests/web/test_metrics.py checks the collector
against them, tests/unit/test_grafana.py the Grafana dashboard."""

from __future__ import annotations

# name -> (type, label names): change only with the docs (docs/dashboard.md) and the
# Grafana dashboard (workers/grafana-dashboard.json)
GOLDEN: dict[str, tuple[str, tuple[str, ...]]] = {
    "tpuq_up": ("gauge", ()),
    "tpuq_scrape_seconds": ("gauge", ()),
    "tpuq_jobs": ("gauge", ("state", "team")),
    "tpuq_hosts": ("gauge", ("state",)),
    "tpuq_chips": ("gauge", ("state", "tpu_type")),
    "tpuq_team_budget_chip_hours": ("gauge", ("period", "team")),
    "tpuq_team_used_chip_hours": ("gauge", ("period", "team")),
    "tpuq_team_burn_chip_hours_per_day": ("gauge", ("team",)),
    "tpuq_job_wait_seconds": ("histogram", ("team",)),
    "tpuq_resume_seconds": ("histogram", ()),
    "tpuq_preemptions": ("counter", ("cause",)),
    "tpuq_lost_work_chip_seconds": ("counter", ("cause",)),
    "tpuq_allocated_chip_seconds": ("counter", ()),
    "tpuq_useful_chip_seconds": ("counter", ()),
    "tpuq_goodput_ratio": ("gauge", ()),
    "tpuq_scheduler_pass_seconds": ("summary", ()),
    "tpuq_scheduler_last_pass_seconds": ("gauge", ()),
    "tpuq_notifications_failed": ("counter", ()),
}
