"""Issue 13's check, as a user runs it: `corral up --nodes 4 --gpus-per-node 8 --controllers 2`, 300 short
jobs that each append their id to a file, the leader SIGKILLed mid-run (its pid from `corral status
--json`): a standby leads within 5 s, every job runs exactly once and ends COMPLETED in sacct, and the old
leader, started again by `corral up`, joins as a standby."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from tests.e2e.harness import wait_for
from tests.e2e.up_ha import corral_up
from tests.slurm.commands import script

pytestmark = pytest.mark.slow

JOBS = 300


def _status(env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-m", "corral.cli.main", "status", "--json"], env=env,
                          capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout) if done.stdout.strip() else {}


def _leader(status: dict) -> dict | None:
    return next((c for c in status.get("controllers", []) if c.get("role") == "leader"), None)


def test_the_leader_killed_mid_run_loses_no_job_and_runs_none_twice():
    with corral_up("--nodes", "4", "--gpus-per-node", "8", prefix="corral-up-failover-") as cluster:
        up, env, root = cluster.up, cluster.env, cluster.root
        work = root / "work"
        work.mkdir()
        work.chmod(0o777)
        ids = work / "ids"
        sbatch = subprocess.run(
            [str(script("sbatch")), "--parsable", "-D", str(work), f"--array=1-{JOBS}", "-o", "/dev/null",
             "--wrap", f"echo $SLURM_JOB_ID >> {ids}; sleep 3"], env=env, capture_output=True, text=True,
            timeout=60)
        assert sbatch.returncode == 0, sbatch.stderr
        wait_for(lambda: ids.exists() and len(ids.read_text().split()) >= JOBS // 3, timeout_s=120,
                 message="a third of the jobs ran")

        leader = _leader(_status(env))
        assert leader is not None
        ran_before = len(ids.read_text().split())
        killed_at = time.monotonic()
        os.kill(leader["pid"], signal.SIGKILL)
        new = wait_for(lambda: (lambda c: c if c and c["url"] != leader["url"] else None)(_leader(_status(env))),
                       timeout_s=30, interval_s=0.1, message="a standby leads")
        took_s = time.monotonic() - killed_at
        print(f"failover {took_s:.2f} s; jobs started before the kill: {ran_before}")
        assert took_s < 5.0, f"the standby led {took_s:.1f} s after the leader died"
        assert new["epoch"] > leader["epoch"]
        assert ran_before < JOBS - 32, "the leader died mid-run, with jobs still to start"

        def all_done() -> bool:
            sacct = subprocess.run([str(script("sacct")), "-X", "-n", "-P", "-o", "JobID,State", "-S", "2000-01-01"],
                                   env=env, capture_output=True, text=True, timeout=60)
            rows = [line.split("|") for line in sacct.stdout.split()]
            return len(rows) == JOBS and all(state == "COMPLETED" for _, state in rows)

        wait_for(all_done, timeout_s=180, interval_s=1.0, message=f"all {JOBS} jobs COMPLETED in sacct")
        ran = Counter(ids.read_text().split())
        assert len(ran) == JOBS and set(ran.values()) == {1}, [i for i, n in ran.items() if n != 1]

        def old_leader_stands_by() -> bool:
            roles = {c["url"]: c.get("role") for c in _status(env).get("controllers", [])}
            return roles.get(leader["url"]) == "standby"

        wait_for(old_leader_stands_by, timeout_s=60, interval_s=0.5, message="the old leader is back, standing by")
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=120) == 0, up.stderr.read()
