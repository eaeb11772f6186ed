"""`tpuq config`: every effective setting, where each value came from, secrets hidden."""

from __future__ import annotations

import json


def test_config_shows_each_value_where_it_came_from_and_hides_passwords(stack):
    stack.home.mkdir(parents=True, exist_ok=True)
    (stack.home / "config.toml").write_text("default_grace_s = 7\n")
    out = stack.tpuq("config", "--json", TPUQ_LEASE_S="9",
                     TPUQ_DATABASE_URL="postgresql://u:secret@127.0.0.1:1/db").stdout
    shown = json.loads(out)
    assert shown["lease_s"] == {"value": 9.0, "source": "TPUQ_LEASE_S", "variable": "TPUQ_LEASE_S"}
    assert shown["default_grace_s"]["value"] == 7.0
    assert shown["default_grace_s"]["source"] == str(stack.home / "config.toml")
    assert shown["maintenance_lead_s"]["source"] == "default"
    assert shown["database_url"]["value"] == "postgresql://u:***@127.0.0.1:1/db"
    assert "pw-xyzzy" not in stack.tpuq("config", TPUQ_DATABASE_URL="postgresql://u:pw-xyzzy@h/d").stdout
    web = json.loads(stack.tpuq("config", "--json", TPUQ_WEB_SECRET="key-xyzzy",
                                              TPUQ_WEB_METRICS_TOKEN="tok-xyzzy").stdout)
    assert web["web_secret"]["value"] == web["web_metrics_token"]["value"] == "***"
    hooks = stack.tpuq("config", "--json",
                       TPUQ_NOTIFY_TO="slack://TokA/TokB/TokC mailto://u:pw@example.org").stdout
    assert json.loads(hooks)["notify_to"]["value"] == "slack://*** mailto://***"
