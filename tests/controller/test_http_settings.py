"""The [http] section: body caps and connection deadlines, each checked with a message naming it."""
from __future__ import annotations

import pytest

from corral.controller.body_gate import MIB, SMALL_BODY_BYTES, HttpSettings, body_cap
from corral.controller.settings import SettingsError, http_from_dict, load_http_settings
from corral.protocol import API_PREFIX


def test_defaults_and_values() -> None:
    assert http_from_dict({}) == HttpSettings() == load_http_settings(None)
    assert http_from_dict({"max_body_mib": 64, "header_timeout_s": 2.5}) == HttpSettings(max_body_mib=64,
                                                                                        header_timeout_s=2.5)


@pytest.mark.parametrize(("section", "message"), [
    ({"max_body_mib": 0}, "config [http]: max_body_mib 0: a whole number, 1..1024"),
    ({"max_agent_body_mib": 2.5}, "config [http]: max_agent_body_mib 2.5: a whole number, 1..1024"),
    ({"header_timeout_s": True}, "config [http]: header_timeout_s True: a number, 1..3600"),
    ({"body_timeout_s": 0.5}, "config [http]: body_timeout_s 0.5: a number, 1..3600"),
    ({"idle_timeout_s": "5"}, "config [http]: idle_timeout_s '5': a number, 1..3600"),
    ({"read_timeout_s": 5}, "config [http]: unknown key(s) read_timeout_s"),
    ([], "config [http]: a table"),
])
def test_bad_values_are_refused(section, message) -> None:
    with pytest.raises(SettingsError) as refused:
        http_from_dict(section)
    assert str(refused.value) == message


def test_each_route_has_its_cap() -> None:
    settings = HttpSettings(max_body_mib=40, max_agent_body_mib=8)
    for method, path in [("POST", "/jobs"), ("POST", "/jobs/12/steps"), ("PUT", "/tenancy")]:
        assert body_cap(method, API_PREFIX + path, settings) == 40 * MIB
    for path in ["/agents/register", "/agents/gpu01/events"]:
        assert body_cap("POST", API_PREFIX + path, settings) == 8 * MIB
    for method, path in [("POST", "/jobs/12/update"), ("POST", "/tokens"), ("GET", "/jobs"),
                         ("POST", "/agents/join"), ("POST", "/jobs/12/steps/x"), ("PUT", "/jobs")]:
        assert body_cap(method, API_PREFIX + path, settings) == SMALL_BODY_BYTES
