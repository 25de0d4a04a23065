"""The controller's audit entries reach the database whether its write lock is free (written on the event
loop at once) or held by another process (written from a thread once it is free): none is lost, in order."""
from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from corral.controller.auth import Authenticator, AuthSettings, Principal
from corral.store import Store
from corral.store.auth_store import AuthStore


def test_audit_entries_are_written_with_the_lock_free_and_after_another_writer_let_it_go(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    with Store.open(f"sqlite:///{path}") as store:
        tokens = AuthStore(store.engine)
        auth = Authenticator("s3cret", AuthSettings(), tokens=tokens, find_job=lambda _id: None)
        alice = Principal("user", "alice", 1001, "socket")

        async def scenario() -> None:
            await auth.audit(alice, "submit", "job 1", "allowed")
            await auth.flush_audit()
            assert [e.target for e in tokens.audit_entries()] == ["job 1"], "written at once, lock free"
            other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            other.execute("BEGIN IMMEDIATE")
            release = threading.Timer(0.3, lambda: (other.execute("ROLLBACK"), other.close()))
            release.start()
            try:
                await auth.audit(alice, "submit", "job 2", "allowed")
                await auth.audit(alice, "cancel", "job 2", "allowed")
                await auth.flush_audit()  # the thread's write waited for the other writer
            finally:
                release.join()

        asyncio.run(scenario())
        assert [(e.action, e.target) for e in tokens.audit_entries()] == [
            ("submit", "job 1"), ("submit", "job 2"), ("cancel", "job 2")]
