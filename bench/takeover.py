"""How long a standby controller takes to lead after the leader dies (SIGKILL) or is cut off (SIGSTOP).

Two controllers on one PostgreSQL database (scripts/pg-test-server.sh), one agent, through the e2e tests'
relay. A takeover is timed from the signal until the other controller says it leads and answers
GET /api/v1/jobs with 200 (its engine rebuilt from the database). Then the old leader is restarted (or
continued) and stands by, and the next round signals whichever leads.

    PYTHONPATH=src python bench/takeover.py [ROUNDS]     # one JSON line per kind of failure
"""
from __future__ import annotations

import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from tests.e2e.harness import API, wait_for  # noqa: E402
from tests.e2e.standby import StandbyCluster  # noqa: E402
from tests.store.pg import fresh_pg_schema, pg_server_url_or_skip  # noqa: E402


def round_s(cluster: StandbyCluster, signum: int) -> float:
    old = cluster.leader()
    cluster.signal(old, signum)
    started = time.monotonic()

    def led() -> bool:
        new = cluster.leader()
        return new is not None and new != old and cluster.direct[new].get(f"{API}/jobs").status_code == 200

    wait_for(led, 30, 0.01, message="a new leader")
    took = time.monotonic() - started
    if signum == signal.SIGKILL:
        cluster.start_controller_at(old)
    else:
        cluster.signal(old, signal.SIGCONT)
    wait_for(lambda: (cluster.status(old) or {}).get("role") == "standby", 30, message="the old leader stands by")
    return took


def measure(rounds: int = 10) -> list[dict]:
    results = []
    with tempfile.TemporaryDirectory() as root, fresh_pg_schema(pg_server_url_or_skip()) as url:
        cluster = StandbyCluster(Path(root), db=url, nodes=1, gpus=1).start()
        try:
            for name, signum in (("SIGKILL", signal.SIGKILL), ("SIGSTOP", signal.SIGSTOP)):
                times = [round_s(cluster, signum) for _ in range(rounds)]
                results.append({"bench": "standby-takeover", "failure": name, "rounds": rounds,
                                "p50_s": round(statistics.median(times), 3), "max_s": round(max(times), 3),
                                "min_s": round(min(times), 3)})
        finally:
            cluster.stop()
    return results


if __name__ == "__main__":
    for result in measure(int(sys.argv[1]) if len(sys.argv) > 1 else 10):
        print(json.dumps(result))
