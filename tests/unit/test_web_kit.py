"""`tpuq web` where users run things: a compose service and a systemd unit that stay
true to the CLI and the settings."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "workers" / "tpuq-web.service"


def entries(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", "[")):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def test_the_compose_service_serves_the_dashboard_with_metrics_behind_a_token() -> None:
    yaml = pytest.importorskip("yaml")
    web = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["web"]
    assert web["command"][0] == "web"
    assert web["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert all(p.startswith("127.0.0.1:") for p in web["ports"])  # loopback on the host
    assert "TPUQ_WEB_METRICS_TOKEN" in web["environment"]


def test_the_unit_runs_tpuq_web_unprivileged_and_comes_back() -> None:
    e = entries(UNIT.read_text())
    assert e["ExecStart"].split()[1:] == ["web"]
    assert e["Restart"] == "always" and e["DynamicUser"] == "yes"
    assert e["EnvironmentFile"] == "/etc/tpuq/web.env"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_the_unit_passes_systemd_analyze() -> None:
    r = subprocess.run(["systemd-analyze", "verify", str(UNIT)], capture_output=True,
                       text=True, timeout=60)
    problems = [ln for ln in r.stderr.splitlines() if ln.strip() and "is not executable" not in ln]
    assert not problems, "\n".join(problems)
