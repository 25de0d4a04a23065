"""[gateway] url: the services' gateway as users' browsers reach it, which the controller tells the dashboard
and `corral notebook` in /health (issue 23). A bad one stops the controller at start with the reason."""
from __future__ import annotations

import re
import subprocess
import sys

import httpx
import pytest

from corral.controller.settings import SettingsError, gateway_url_from_dict, settings_from_dict
from tests.e2e.harness import free_port, wait_for


@pytest.mark.parametrize(("section", "want"), [
    ({}, None),
    ({"url": "https://gpu.example.org:6820"}, "https://gpu.example.org:6820"),
    ({"url": "http://10.0.0.5:6820/"}, "http://10.0.0.5:6820"),  # the links add /s/NAME/ themselves
    ({"url": "https://example.org/corral-gateway/"}, "https://example.org/corral-gateway"),  # behind a proxy
])
def test_a_gateway_url_is_read(section, want) -> None:
    assert gateway_url_from_dict(section, "c.toml") == want


@pytest.mark.parametrize(("section", "problem"), [
    ("https://x", "c.toml [gateway]: a table"),
    ({"url": "gateway.example:6820"}, "url: 'gateway.example:6820': an http:// or https:// URL with a host"),
    ({"url": "ftp://gateway.example"}, "an http:// or https:// URL with a host"),
    ({"url": "http://"}, "an http:// or https:// URL with a host"),
    ({"url": "http://gw:99999"}, "url: 'http://gw:99999': Port out of range 0-65535"),
    ({"url": "http://gw:6820/?token=x"}, "no query, fragment or credentials"),
    ({"url": "http://me:pw@gw:6820"}, "no query, fragment or credentials"),
    ({"url": 6820}, "url: 6820: a URL as a string"),
    ({"url": "http://gw", "port": 1}, "c.toml [gateway]: unknown key(s) port"),
])
def test_a_bad_gateway_url_is_refused_with_the_reason(section, problem) -> None:
    with pytest.raises(SettingsError, match=re.escape(problem)):
        gateway_url_from_dict(section, "c.toml")


def test_the_section_is_a_known_top_level_key() -> None:
    settings_from_dict({"gateway": {"url": "http://gw:6820"}})  # not "unknown key(s) gateway"


def controller(tmp_path, *more: str) -> subprocess.Popen:
    (tmp_path / "secret").write_text("s3cret-dashgw\n")
    return subprocess.Popen([sys.executable, "-m", "corral.controller", "--secret-file", str(tmp_path / "secret"),
                             "--state-dir", str(tmp_path), *more], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_health_tells_the_gateway_and_the_flag_overrides_the_config(tmp_path) -> None:
    port = free_port()
    config = tmp_path / "corral.toml"
    config.write_text('[gateway]\nurl = "https://gpu.example.org:6820"\n')
    process = controller(tmp_path, "--listen", f"127.0.0.1:{port}", "--config", str(config),
                         "--gateway-url", "http://127.0.0.1:7820/")
    try:
        def health() -> dict | None:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
            except httpx.TransportError:
                return None
        wait_for(lambda: health() is not None, 30, message="the controller answers")
        assert health()["gateway_url"] == "http://127.0.0.1:7820"
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_a_bad_gateway_url_stops_the_controller_at_start(tmp_path) -> None:
    process = controller(tmp_path, "--listen", f"127.0.0.1:{free_port()}", "--gateway-url", "gw:6820")
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2
    assert "corral-controller: error: --gateway-url: 'gw:6820': an http:// or https:// URL with a host" in err
