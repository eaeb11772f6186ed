"""Where a notification may go (tpuq/destinations.py): the rule the submit and the
courier share, on addresses written every way a resolver reads them."""

from __future__ import annotations

import ipaddress

import pytest

from tpuq.destinations import Refused, Rule, own_services, parse_allow
from tpuq.settings import SettingsError, load


def refused(rule: Rule, url: str) -> str:
    with pytest.raises(Refused) as e:
        rule.check_url(url)
    return str(e.value)


def test_the_deployments_own_database_and_broker_are_refused_by_name_and_address():
    own = own_services("postgresql+psycopg://tpuq:pw@10.1.2.3:5432/tpuq",
                       "redis://:pw@redis-host:6379/0")
    assert own == [("database", "//10.1.2.3"), ("broker", "//redis-host")], "no passwords"
    rule = Rule.of("", own)
    assert "10.1.2.3 is the deployment's database host" in refused(rule, "json://10.1.2.3/x")
    assert "redis-host is the deployment's broker host" in refused(
        rule, "json://redis-host:6379/")
    assert rule.why_not(ipaddress.ip_address("10.1.2.3")) == "the deployment's database host"
    assert rule.why_not(ipaddress.ip_address("10.1.2.4")) is None, "a lab's own network is fine"
    rule.check_url("mailto://user:pw@smtp.example.org")  # not resolvable here: the courier decides
    rule.check_url("slack://TokenA/TokenB/TokenC")


def test_an_admin_allows_networks_addresses_and_names():
    rule = Rule.of("127.0.0.1, 169.254.0.0/16 hooks.internal", [])
    rule.check_url("json://127.0.0.1:9/x")
    rule.check_url("json://169.254.169.254/")
    rule.check_url("json://hooks.internal/x")
    assert "127.0.0.2 is a loopback address" in refused(rule, "json://127.0.0.2/")
    assert "::1 is a loopback address" in refused(rule, "json://[::1]:80/")
    assert parse_allow("10.0.0.0/8 mail.example.org")[1] == ["mail.example.org"]
    with pytest.raises(ValueError, match="'b/c' is neither"):
        parse_allow("hooks.internal b/c")


def test_a_bad_allow_setting_is_one_line():
    with pytest.raises(SettingsError, match="TPUQ_NOTIFY_ALLOW: 'http://x' is neither"):
        load({"TPUQ_NOTIFY_ALLOW": "10.0.0.0/8 http://x", "TPUQ_HOME": "/nonexistent"})
