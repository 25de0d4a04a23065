"""Per-user request rate limits ([ratelimit], Slurm's rl_enable): the token bucket on a fake clock, the
section's validation, and the 429 with Retry-After that the real controller answers over HTTP."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corral.controller import credentials as cred
from corral.controller.__main__ import build_app
from corral.controller.ratelimit import RATE_LIMITED, RateLimiter, RateLimitSettings
from corral.controller.settings import SettingsError, ratelimit_from_dict
from corral.engine.config import EngineConfig
from corral.protocol import API_PREFIX
from corral.store import Store
from tests.cli.standin import ServerThread

SECRET = "ratelimit-secret"
NODE = {"node": "node1", "address": "127.0.0.1", "gpus": [], "cpus": 16, "mem_mib": 64000}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limiter(clock: Clock, **settings: int) -> RateLimiter:
    return RateLimiter(RateLimitSettings(enabled=True, **settings), clock)


def test_a_burst_of_bucket_size_passes_then_the_next_request_waits_for_the_refill():
    clock = Clock()
    limits = limiter(clock, bucket_size=3, refill_rate=2, refill_period_s=5)
    assert [limits.retry_after_s("alice") for _ in range(3)] == [None, None, None]
    clock.now = 1001.5  # periods are whole multiples of 5 s: the next one starts at 1005
    assert limits.retry_after_s("alice") == pytest.approx(3.5)


def test_tokens_come_back_refill_rate_per_period_up_to_the_bucket_size():
    clock = Clock()
    limits = limiter(clock, bucket_size=5, refill_rate=2, refill_period_s=1)
    for _ in range(5):
        assert limits.retry_after_s("alice") is None
    assert limits.retry_after_s("alice") is not None
    clock.now += 1  # one period: two tokens
    assert [limits.retry_after_s("alice") is None for _ in range(3)] == [True, True, False]
    clock.now += 3600  # a long rest fills the bucket, no more
    assert sum(limits.retry_after_s("alice") is None for _ in range(10)) == 5


def test_refused_requests_are_told_to_come_back_one_refill_after_another():
    clock = Clock()
    limits = limiter(clock, bucket_size=1, refill_rate=2, refill_period_s=1)
    assert limits.retry_after_s("alice") is None
    clock.now = 1000.25
    # Two tokens come back each second: the refused are spread over the refills that will make room.
    assert [limits.retry_after_s("alice") for _ in range(5)] == [0.75, 0.75, 1.75, 1.75, 2.75]
    clock.now = 1003.0  # three refills: six places for the five told to wait, so nobody is ahead any more
    assert [limits.retry_after_s("alice") for _ in range(2)] == [None, 1.0]


def test_each_user_has_a_bucket_of_their_own():
    clock = Clock()
    limits = limiter(clock, bucket_size=2, refill_rate=1, refill_period_s=60)
    assert [limits.retry_after_s("alice") is None for _ in range(3)] == [True, True, False]
    assert [limits.retry_after_s("bob") is None for _ in range(2)] == [True, True]
    assert limits.retry_after_s("alice") is not None


def test_the_table_keeps_the_most_recently_seen_users():
    clock = Clock()
    limits = limiter(clock, bucket_size=1, refill_rate=1, refill_period_s=60, table_size=2)
    assert limits.retry_after_s("alice") is None
    assert limits.retry_after_s("bob") is None
    assert limits.retry_after_s("alice") is not None  # alice is now the most recently seen
    assert limits.retry_after_s("carol") is None  # bob, the least recent, makes room
    assert len(limits) == 2
    assert limits.retry_after_s("alice") is not None  # still tracked: still empty
    assert limits.retry_after_s("bob") is None  # forgotten: a full bucket again


def test_a_long_list_puts_the_bucket_in_debt_and_the_next_request_waits_for_its_repayment():
    clock = Clock()
    limits = limiter(clock, bucket_size=4, refill_rate=2, refill_period_s=1, records_per_token=1000)
    assert limits.retry_after_s("alice") is None  # the list's own token: 3 left
    limits.charge("alice", 8_999)  # 8 more: 5 in debt
    assert limits.retry_after_s("alice") == pytest.approx(3.0)  # 6 tokens needed: 3 refills of 2
    clock.now += 3
    assert limits.retry_after_s("alice") is None
    limits.charge("alice", 999)  # under records_per_token: free
    assert limits.retry_after_s("bob") is None


def test_no_charge_with_records_per_token_0():
    clock = Clock()
    limits = limiter(clock, bucket_size=1, refill_rate=1, refill_period_s=1, records_per_token=0)
    assert limits.retry_after_s("alice") is None
    clock.now += 1
    limits.charge("alice", 10**6)
    assert limits.retry_after_s("alice") is None


@pytest.mark.parametrize(("section", "message"), [
    ({"enabled": "yes"}, r"\[ratelimit\]: enabled 'yes': true or false"),
    ({"bucket_size": 0}, r"\[ratelimit\]: bucket_size 0: a whole number, 1..1,000,000"),
    ({"refill_rate": 1.5}, r"\[ratelimit\]: refill_rate 1.5: a whole number"),
    ({"refill_period_s": True}, r"\[ratelimit\]: refill_period_s True: a whole number, 1..3,600"),
    ({"table_size": -1}, r"\[ratelimit\]: table_size -1: a whole number"),
    ({"rl_enable": True}, r"\[ratelimit\]: unknown key\(s\) rl_enable"),
    ([1], r"\[ratelimit\]: a table"),
    ({"records_per_token": -1}, r"\[ratelimit\]: records_per_token -1: a whole number, 0 \(no charge\)"),
    ({"records_per_token": True}, r"records_per_token True: a whole number"),
    ({"records_per_token": 1.5}, r"records_per_token 1.5: a whole number"),
])
def test_bad_ratelimit_settings_are_refused_with_the_key_named(section, message):
    with pytest.raises(SettingsError, match=message):
        ratelimit_from_dict(section, "corral.toml")


def test_ratelimit_settings_default_to_slurms_and_off():
    assert ratelimit_from_dict({}) == RateLimitSettings(enabled=False, bucket_size=30, refill_rate=2,
                                                        refill_period_s=1, table_size=8192, records_per_token=1000)
    assert ratelimit_from_dict({"records_per_token": 0}).records_per_token == 0
    assert ratelimit_from_dict({"enabled": True, "bucket_size": 50, "refill_rate": 10}) == RateLimitSettings(
        enabled=True, bucket_size=50, refill_rate=10)


def test_the_controller_refuses_a_config_file_with_a_bad_ratelimit(tmp_path, capsys):
    from corral.controller.__main__ import main

    (tmp_path / "secret").write_text("s")
    (tmp_path / "corral.toml").write_text("[ratelimit]\nbucket_size = 0\n")
    code = main(["--secret-file", str(tmp_path / "secret"), "--config", str(tmp_path / "corral.toml"),
                 "--state-dir", str(tmp_path)])
    assert code == 2
    assert "[ratelimit]: bucket_size 0: a whole number" in capsys.readouterr().err


@contextlib.contextmanager
def limited_controller(root: Path, limits: RateLimitSettings) -> Iterator[str]:
    _clear_of_refills(limits.refill_period_s)
    store = Store.open(f"sqlite:///{root / 'corral.db'}")
    with ServerThread(build_app(EngineConfig(), store, SECRET, ratelimit=limits)) as server:
        yield server.url + API_PREFIX


def _clear_of_refills(period_s: int, margin_s: float = 5.0) -> None:
    """The tests count tokens and expect no refill while they run, but refills come at whole periods since
    the epoch: one that is near is waited out, so the test starts just after it."""
    left = period_s - time.time() % period_s
    if period_s > margin_s and left < margin_s:
        time.sleep(left + 0.05)


def client(url: str, credential: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {credential}"}, timeout=10,
                        trust_env=False)


def user_credential(name: str, uid: int) -> str:
    return cred.issue_user(cred.signing_key(SECRET), name, uid, uid, time.time(), 300)


def test_a_user_over_the_limit_gets_429_with_retry_after_and_others_do_not(tmp_path):
    limits = RateLimitSettings(enabled=True, bucket_size=3, refill_rate=1, refill_period_s=60)
    with limited_controller(tmp_path, limits) as url, \
            client(url, user_credential("alice", 5001)) as alice, client(url, user_credential("bob", 5002)) as bob:
        assert [alice.get("/jobs").status_code for _ in range(3)] == [200, 200, 200]
        refused = alice.get("/accounting")
        assert refused.status_code == 429
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert refused.json()["detail"].startswith(
            f"{RATE_LIMITED}: user alice sent more than 3 requests at once or more than 1 per 60 s; retry in ")
        assert [bob.get("/jobs/1").status_code for _ in range(3)] == [404, 404, 404]  # bob's own bucket


def test_a_user_listing_many_jobs_pays_for_them_and_waits(tmp_path):
    limits = RateLimitSettings(enabled=True, bucket_size=5, refill_rate=1, refill_period_s=60, records_per_token=2)
    with limited_controller(tmp_path, limits) as url, client(url, SECRET) as service, \
            client(url, user_credential("alice", 5001)) as alice, client(url, user_credential("bob", 5002)) as bob:
        assert service.post("/agents/register", json=NODE).status_code == 200
        reply = service.post("/jobs", json={"workdir": str(tmp_path), "user": "alice", "uid": 5001,
                                            "argv": ["true"], "hold": True, "array": "0-5"})
        assert reply.status_code == 201, reply.text
        listed = alice.get("/jobs")  # 6 tasks: 1 token + 3
        assert listed.status_code == 200 and len(listed.json()) == 6
        assert alice.get("/jobs/1").status_code == 200  # the fifth token
        refused = alice.get("/jobs/1")
        assert refused.status_code == 429
        assert bob.get("/jobs", params={"combine_arrays": True}).status_code == 200  # bob's own bucket
        assert bob.get("/accounting").status_code == 200  # 6 more: in debt now
        assert bob.get("/jobs/1").status_code == 429


def test_the_service_credential_and_agents_are_not_limited(tmp_path):
    limits = RateLimitSettings(enabled=True, bucket_size=1, refill_rate=1, refill_period_s=60)
    agent = cred.issue_agent(cred.signing_key(SECRET), "node1")
    with limited_controller(tmp_path, limits) as url, client(url, SECRET) as service, client(url, agent) as node1:
        assert {service.get("/nodes").status_code for _ in range(5)} == {200}
        assert {node1.post("/agents/register", json=NODE).status_code for _ in range(5)} == {200}


def test_without_enabled_nobody_is_limited(tmp_path):
    limits = RateLimitSettings(enabled=False, bucket_size=1, refill_rate=1, refill_period_s=60)
    with limited_controller(tmp_path, limits) as url, client(url, user_credential("alice", 5001)) as alice:
        assert {alice.get("/jobs").status_code for _ in range(5)} == {200}


def test_a_jobs_own_credential_takes_from_its_users_bucket(tmp_path):
    limits = RateLimitSettings(enabled=True, bucket_size=2, refill_rate=1, refill_period_s=3600)
    with limited_controller(tmp_path, limits) as url, client(url, SECRET) as service:
        assert service.post("/agents/register", json=NODE).status_code == 200
        reply = service.post("/jobs", json={"workdir": str(tmp_path), "user": "alice", "uid": 5001, "argv": ["true"]})
        assert reply.status_code == 201, reply.text
        job = service.get(f"/jobs/{reply.json()['job_id']}").json()
        job_credential = cred.issue_job(cred.signing_key(SECRET), job["id"], 5001, job["submit_time"])
        with client(url, job_credential) as task, client(url, user_credential("alice", 5001)) as alice, \
                client(url, user_credential("bob", 5002)) as bob:
            assert task.get("/whoami").json()["kind"] == "job"
            assert alice.get("/jobs").status_code == 200
            assert task.get("/jobs").status_code == 429
            assert bob.get("/jobs").status_code == 200
