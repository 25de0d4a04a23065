"""Who is an admin: root by name and uid, and the names the config lists. A job an admin submitted for
another user without a uid records uid 0; its job credential (the job's user) must not be an admin."""
from __future__ import annotations

import asyncio
import pwd

import pytest

from corral.controller.auth import Authenticator, AuthSettings
from corral.controller.credentials import issue_job
from corral.core.model import Request
from corral.engine.records import Job, JobSpec, JobState

ROOT = pwd.getpwuid(0).pw_name


def authenticator(jobs: dict[int, Job], **settings) -> Authenticator:
    return Authenticator("s3cret", AuthSettings(**settings), tokens=None, find_job=jobs.get)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "uid", "admin", "operator"), [
    (ROOT, 0, True, True),
    ("alice", 0, False, False),  # uid 0 recorded for someone else: not root
    ("alice", 1000, False, False),
    ("boss", 1001, True, True),  # [auth] admins
    ("ops", 1002, False, True),  # [auth] operators
])
def test_roles(name, uid, admin, operator):
    auth = authenticator({}, admins=frozenset({"boss"}), operators=frozenset({"ops"}))
    assert auth.roles(name, uid) == (admin, operator)


def test_the_job_credential_of_a_job_recorded_with_uid_0_for_another_user_is_no_admin():
    job = Job(id=7, spec=JobSpec(name="j", user="alice", request=Request(), uid=0), submit_time=1.0,
              state=JobState.RUNNING)
    auth = authenticator({7: job})
    principal = asyncio.run(auth.authenticate(issue_job(auth.key, 7, 0, 1.0)))
    assert (principal.name, principal.uid, principal.admin, principal.operator) == ("alice", 0, False, False)
