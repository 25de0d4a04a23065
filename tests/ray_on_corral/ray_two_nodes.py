"""The Ray program of the Ray tests: one task on each node of the Ray cluster, each saying which corral
node ran it (SLURMD_NODENAME, inherited from the srun step or job that started that node's raylet).

Usage: python ray_two_nodes.py [--pin=NODE[,NODE...]] [ignored...] (the recipe passes its CPU count). It
waits for 2 Ray nodes (or one per NODE: workers join after the head), pins one task to each, and prints
one line per task, `task on <corral node> host <hostname>`. With --pin it pins by the custom resource
`corral ray` gives each Ray node (`{"node2": 1}`); without, by node affinity (Ray's recipe declares no
custom resources)."""
import os
import socket
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

JOIN_WAIT_S = 120


@ray.remote(num_cpus=1)
def where() -> str:
    return f"{os.environ.get('SLURMD_NODENAME', '?')} host {socket.gethostname()}"


def main() -> None:
    pins = [name for arg in sys.argv[1:] if arg.startswith("--pin=") for name in arg[6:].split(",")]
    expected = len(pins) or 2
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"))
    deadline = time.monotonic() + JOIN_WAIT_S
    while len(alive := [n for n in ray.nodes() if n["Alive"]]) < expected:
        if time.monotonic() > deadline:
            sys.exit(f"only {len(alive)} of {expected} Ray nodes joined within {JOIN_WAIT_S} s")
        time.sleep(1)
    if pins:
        tasks = [where.options(resources={name: 0.01}).remote() for name in pins]
    else:
        tasks = [where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
                 for n in alive]
    for task in tasks:
        print(f"task on {ray.get(task)}", flush=True)


if __name__ == "__main__":
    main()
