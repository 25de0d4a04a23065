"""The controller on PostgreSQL: jobs run, are accounted, and survive a controller restart."""
from __future__ import annotations

import pytest

from tests.store.pg import fresh_pg_schema, pg_server_url_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def test_controller_on_postgresql(cluster_factory) -> None:
    with fresh_pg_schema(pg_server_url_or_skip()) as url:
        cluster = cluster_factory(nodes=1, gpus=2, db=url)
        first = cluster.submit(argv=["true"], gpus=2)
        cluster.wait_state(first, "COMPLETED")
        cluster.kill_controller()
        cluster.start_controller()
        second = cluster.submit(argv=["true"], gpus=1)
        assert second == first + 1, "job ids continue from the database"
        cluster.wait_state(second, "COMPLETED")
        acct = cluster.http.get("/api/v1/accounting").json()
        assert [j["state"] for j in acct] == ["COMPLETED", "COMPLETED"]
        cluster.stop()
