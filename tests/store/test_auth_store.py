"""Tokens and the audit log in the database (migration 0003): they round-trip, revocation sticks, and the
migration goes down to 0002 and up again with the data of the other tables intact."""
from __future__ import annotations

from alembic import command
from sqlalchemy import inspect

from corral.store import Store, migrate
from corral.store.auth_store import AuditEntry, AuthStore
from tests.store.factories import full_job


def test_tokens_round_trip_and_revocation_sticks(db_url: str) -> None:
    with Store.open(db_url) as store:
        tokens = AuthStore(store.engine)
        first = tokens.add_token("alice", 1001, "ab" * 32, "laptop", 100.5, "root", 200.25)
        second = tokens.add_token("bob", 1002, "cd" * 32, "", 101.0, "bob", 300.0)
        tokens.revoke_token(first, 150.0)
        tokens.revoke_token(first, 160.0)  # the first revocation's time stays
    with Store.open(db_url) as store:
        tokens = AuthStore(store.engine)
        alice = tokens.token(first)
        assert alice is not None
        assert (alice.user, alice.uid, alice.secret_sha256, alice.description, alice.created, alice.created_by,
                alice.expires, alice.revoked) == ("alice", 1001, "ab" * 32, "laptop", 100.5, "root", 200.25, 150.0)
        assert [t.id for t in tokens.tokens()] == [first, second]
        assert [t.user for t in tokens.tokens("bob")] == ["bob"]
        assert tokens.token(second + 1) is None


def test_the_audit_log_keeps_order_and_answers_the_newest(db_url: str) -> None:
    entries = [AuditEntry(float(t), f"user{t}", "socket", "cancel", f"job {t}", "denied", "not yours")
               for t in range(1, 6)]
    with Store.open(db_url) as store:
        log = AuthStore(store.engine)
        for entry in entries:
            log.audit(entry)
        assert log.audit_entries() == entries
        assert log.audit_entries(limit=2) == entries[-2:]
        assert log.audit_entries(since=4.0) == entries[3:]


def test_migration_0003_goes_down_and_up(db_url: str) -> None:
    with Store.open(db_url) as store:
        store.save(jobs=[full_job(7)])
        AuthStore(store.engine).add_token("alice", 1001, "ef" * 32, "", 1.0, "root", 2.0)
        with store.engine.begin() as connection:
            command.downgrade(migrate.alembic_config(connection), "0002")
        tables = set(inspect(store.engine).get_table_names())
        assert "api_tokens" not in tables and "audit_log" not in tables and "jobs" in tables
    with Store.open(db_url) as store:
        assert store.get_job(7) == full_job(7)
        assert AuthStore(store.engine).tokens() == []  # tokens went with the table: none survives a downgrade


def test_a_join_token_is_used_once_even_by_racing_threads(db_url: str) -> None:
    import threading

    with Store.open(db_url) as store:
        tokens = AuthStore(store.engine)
        token_id = tokens.add_join_token("ef" * 32, None, "rack 3", 100.0, "root", 200.0)
        late = tokens.add_join_token("01" * 32, "gpu09", "", 100.0, "root", 200.0)
        revoked = tokens.add_join_token("23" * 32, None, "", 100.0, "root", 200.0)
        tokens.revoke_join_token(revoked, 110.0)
        start, won = threading.Barrier(6), []

        def use(node: str) -> None:
            start.wait()
            if tokens.use_join_token(token_id, node, "10.0.0.7", 150.0):
                won.append(node)

        threads = [threading.Thread(target=use, args=(f"gpu{i}",)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(won) == 1
        record = tokens.join_token(token_id)
        assert record is not None
        assert (record.used, record.used_by, record.used_from, record.node, record.description) == (
            150.0, won[0], "10.0.0.7", None, "rack 3")
        assert not tokens.use_join_token(late, "gpu09", "10.0.0.8", 200.0)  # expired at 200
        assert not tokens.use_join_token(revoked, "gpu10", "10.0.0.9", 150.0)
        assert [(t.id, t.used_by) for t in tokens.join_tokens()] == [(token_id, won[0]), (late, None), (revoked, None)]
