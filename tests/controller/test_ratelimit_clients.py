"""The Slurm commands' client and the CLI's client against a real controller with a request rate limit:
they sleep per Retry-After and try again, and give up after a bounded number of tries with a clear
message (Slurm's commands sleep 1 s, 2 s, ... on SLURMCTLD_COMMUNICATIONS_BACKOFF)."""
from __future__ import annotations

import time

import pytest

from corral.cli import client as cli_client
from corral.controller.ratelimit import RATE_LIMITED, RateLimitSettings
from corral.slurm.common import http
from corral.slurm.common.command import api_message
from tests.controller.test_ratelimit import limited_controller, user_credential

# One request at once, one more each second: the second request of a burst waits about a second.
ONE_PER_S = RateLimitSettings(enabled=True, bucket_size=1, refill_rate=1, refill_period_s=1)
ONE_PER_HOUR = RateLimitSettings(enabled=True, bucket_size=1, refill_rate=1, refill_period_s=3600)


def test_the_slurm_client_sleeps_and_retries_until_the_controller_takes_the_request(tmp_path):
    with limited_controller(tmp_path, ONE_PER_S) as url:
        controller = http.Controller(url.removesuffix(http.API_PREFIX), user_credential("alice", 5001))
        assert controller.jobs() == []
        started = time.monotonic()
        assert controller.accounting() == []  # refused once, taken after the sleep
        assert time.monotonic() - started >= 0.9


def test_the_slurm_client_gives_up_with_slurms_message(tmp_path, monkeypatch):
    monkeypatch.setattr(http, "RATE_LIMIT_MAX_WAIT_S", 0.05)
    with limited_controller(tmp_path, ONE_PER_HOUR) as url:
        controller = http.Controller(url.removesuffix(http.API_PREFIX), user_credential("alice", 5001))
        controller.jobs()
        with pytest.raises(http.ApiError) as refused:
            controller.jobs()
    assert refused.value.status == 429
    assert refused.value.detail.endswith(f"(gave up after {http.RATE_LIMIT_RETRIES + 1} tries over 0 s)")
    assert api_message("squeue", refused.value).startswith(f"squeue: error: {RATE_LIMITED}: user alice ")


def test_the_cli_client_sleeps_and_retries_until_the_controller_takes_the_request(tmp_path):
    with limited_controller(tmp_path, ONE_PER_S) as url, \
            cli_client.Client(url.removesuffix(cli_client.API_PREFIX), user_credential("alice", 5001)) as client:
        assert client.jobs() == []
        started = time.monotonic()
        assert client.nodes() == []
        assert time.monotonic() - started >= 0.9


def test_the_cli_client_gives_up_with_a_clear_message(tmp_path, monkeypatch):
    monkeypatch.setattr(cli_client, "RATE_LIMIT_MAX_WAIT_S", 0.05)
    with limited_controller(tmp_path, ONE_PER_HOUR) as url, \
            cli_client.Client(url.removesuffix(cli_client.API_PREFIX), user_credential("alice", 5001)) as client:
        client.nodes()
        with pytest.raises(cli_client.ClientError) as refused:
            client.nodes()
    assert refused.value.status == 429
    assert str(refused.value).startswith(f"{RATE_LIMITED}: user alice sent more than 1 requests at once")
    assert str(refused.value).endswith(f"(gave up after {cli_client.RATE_LIMIT_RETRIES + 1} tries over 0 s)")


@pytest.mark.parametrize("retry_wait_s", [http.retry_wait_s, cli_client.retry_wait_s])
def test_the_wait_grows_like_slurms_never_below_retry_after_and_is_capped(retry_wait_s):
    assert [retry_wait_s("1", retry) for retry in (1, 2, 3)] == [1.0, 2.0, 3.0]
    assert retry_wait_s("4", 1) == 4.0
    assert retry_wait_s(None, 2) == 2.0
    assert retry_wait_s("soon", 1) == 1.0
    assert retry_wait_s("3600", 1) == 10.0
