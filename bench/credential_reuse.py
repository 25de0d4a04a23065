"""What reusing an auth-socket credential saves a call (corral.slurm.common.credential_reuse, decision 0021).

Starts a real controller (its own process, SQLite, one agent: tests/e2e/harness.py) with its auth socket, as a
`corral up` cluster that other users reach has, and times in this process, call for call in turn:
- `credential`: getting the credential the way a call does (resolve_target): asked of the auth socket each
  time (before) against reused from the command helper's memory (after);
- `squeue_request`: a whole squeue request (resolve the target, GET /jobs with the fields squeue shows):
  with a credential asked each time against a reused one.
Wall-clock medians and 90th percentiles in milliseconds, and the load average before and after. A credential
asked of the socket wakes the controller's process before the request does: the figures include that.

    python bench/credential_reuse.py [--calls N]      (default 300)"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.harness import Cluster  # noqa: E402

from corral.slurm.common import credential_reuse  # noqa: E402
from corral.slurm.common.http import JOB_LINE_FIELDS, Controller  # noqa: E402
from corral.slurm.common.target import resolve_target  # noqa: E402


def summary(times_ms: list[float]) -> dict[str, float]:
    ordered = sorted(times_ms)
    return {"median_ms": round(statistics.median(ordered), 3),
            "p90_ms": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 3)}


def timed(action) -> float:  # noqa: ANN001
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000


def squeue_request(env: dict[str, str], reuse: bool) -> None:
    target = resolve_target(env, reuse=reuse)
    controller = Controller(target.urls, target.secret, reused_from=target.reused_from)
    controller.jobs(fields=JOB_LINE_FIELDS)


def run(calls: int) -> dict:
    result: dict = {"bench": "credential-reuse", "calls": calls, "loadavg_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="corral-credential-reuse-") as tmp:
        root = Path(tmp)
        socket_path = str(root / "auth.sock")
        cluster = Cluster(root, nodes=1, gpus=8, controller_args=("--auth-socket", socket_path)).start()
        try:
            cluster_file = root / "cluster.json"
            cluster_file.write_text(json.dumps({"url": cluster.url, "auth_socket": socket_path}))
            env = {"CORRAL_SYSTEM_CLUSTER_FILE": str(cluster_file), "XDG_CONFIG_HOME": str(root / "none"),
                   "HOME": tmp, "LOGNAME": "root"}
            credential_reuse.install(credential_reuse.Reuse())
            figures: dict[str, list[float]] = {name: [] for name in (
                "credential_asked", "credential_reused", "squeue_request_asked", "squeue_request_reused")}
            resolve_target(env, reuse=True)  # the first call of a helper asks; the rest reuse
            for _ in range(calls):
                figures["credential_asked"].append(timed(lambda: resolve_target(env)))
                figures["credential_reused"].append(timed(lambda: resolve_target(env, reuse=True)))
                figures["squeue_request_asked"].append(timed(lambda: squeue_request(env, False)))
                figures["squeue_request_reused"].append(timed(lambda: squeue_request(env, True)))
        finally:
            cluster.stop()
    result |= {name: summary(times) for name, times in figures.items()}
    result["loadavg_after"] = os.getloadavg()[0]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    print(json.dumps(run(parser.parse_args().calls)))


if __name__ == "__main__":
    main()
