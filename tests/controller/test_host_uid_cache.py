"""The controller's cache of its host's user database (identity_rules.host_uid; docs/security.md, "The
controller's user-database cache"): an answer is kept at most HOST_UID_TTL_S, and made-up names cannot
grow it past HOST_UID_CACHE_MAX. A real user, made with useradd and removed afterwards."""
from __future__ import annotations

import os
import pwd
import subprocess
import time

import pytest

from corral.controller import identity_rules

USER = "csr-submitrate-cache"


@pytest.fixture
def absent_user():
    if os.geteuid() != 0:
        pytest.skip("useradd needs root")
    subprocess.run(["userdel", USER], capture_output=True, check=False)
    yield USER
    subprocess.run(["userdel", USER], capture_output=True, check=False)


def test_a_user_made_after_a_lookup_is_seen_once_the_answer_expires(absent_user: str) -> None:
    assert identity_rules.host_uid(absent_user) is None
    subprocess.run(["useradd", "--no-create-home", absent_user], check=True)
    uid = pwd.getpwnam(absent_user).pw_uid
    seen_at = time.monotonic()
    while identity_rules.host_uid(absent_user) != uid:
        assert time.monotonic() - seen_at < identity_rules.HOST_UID_TTL_S + 1.0, "a stale answer outlived its TTL"
        time.sleep(0.05)
    subprocess.run(["userdel", absent_user], check=True)
    gone_at = time.monotonic()
    while identity_rules.host_uid(absent_user) is not None:
        assert time.monotonic() - gone_at < identity_rules.HOST_UID_TTL_S + 1.0, "a deleted user outlived the TTL"
        time.sleep(0.05)


def test_made_up_names_do_not_grow_the_cache_past_its_bound() -> None:
    for i in range(identity_rules.HOST_UID_CACHE_MAX + 500):
        assert identity_rules.host_uid(f"nobody-submitrate-{i}") is None
    assert len(identity_rules._host_uids) <= identity_rules.HOST_UID_CACHE_MAX
    assert identity_rules.host_uid("root") == 0
