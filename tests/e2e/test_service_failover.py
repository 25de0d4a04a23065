"""A controller failover does not interrupt a service's endpoint (issue 22): `corral up --controllers 2`
with its gateway, a 2-replica service applied with `corral service apply` (its workdir the directory it
ran in), one client's GETs through the gateway while the leader is killed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.e2e.harness import wait_for
from tests.e2e.test_services import APP, Load
from tests.e2e.test_up_failover import _leader, _status
from tests.e2e.up_ha import corral_up

pytestmark = pytest.mark.slow

SERVICE = f"""
name = "steady"
command = ["{sys.executable}", "{APP}"]
replicas = 2
public = true
[[ports]]
name = "http"
[probes.readiness]
http = {{ path = "/health", port = "http" }}
period_s = 0.5
"""


def test_a_controller_failover_does_not_interrupt_the_endpoint():
    with corral_up("--nodes", "2", "--gpus-per-node", "1", prefix="corral-svcint-failover-") as cluster:
        env, work = cluster.env, cluster.root / "work"
        work.mkdir()
        (work / "steady.toml").write_text(SERVICE)
        corral = [sys.executable, "-m", "corral.cli.main"]
        applied = subprocess.run([*corral, "service", "apply", "-f", "steady.toml"], cwd=work, env=env,
                                 capture_output=True, text=True, timeout=60)
        assert applied.stdout == "service steady created (revision 1)\n", applied.stderr

        def ready() -> bool:
            shown = subprocess.run([*corral, "service", "show", "steady", "--json"], env=env, capture_output=True,
                                   text=True, timeout=60)
            return shown.returncode == 0 and '"ready_replicas": 2' in shown.stdout.replace('":2', '": 2')

        wait_for(ready, 60, 0.5, "2 ready replicas")
        assert sorted(p.name for p in work.glob("steady-*.out")), "the replicas' output where apply ran"
        leader = _leader(_status(env))
        with Load(f"{cluster.gateway_url}/s/steady/") as load:
            time.sleep(1)
            os.kill(leader["pid"], signal.SIGKILL)
            wait_for(lambda: (lambda c: c and c["url"] != leader["url"])(_leader(_status(env))), 30, 0.2,
                     "a standby leads")
            time.sleep(2)
        print(f"failover: {len(load.answers) + len(load.failures)} requests through the gateway, "
              f"{len(load.failures)} failed, p99 {load.p99_ms():.0f} ms")
        assert load.failures == [] and len(load.answers) > 20
        assert len({answer.split()[1] for answer in load.answers}) == 2, "both replicas answered throughout"
        wait_for(ready, 30, 0.5, "the new leader shows both replicas ready")
