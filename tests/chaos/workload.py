"""The fault suite's jobs: short tasks that leave proof of what ran (the markers `checker.py` reads).

Each task writes <marks>/<job>.<restart count>.<node id>.<pid>.marker: a `start` line, a `beat` line every
BEAT_S while it works, and an `end` line once its work is done. bash's $EPOCHREALTIME gives the time
without a fork, so a beat costs nothing but a write. The job is a non-batch job (every task runs the
script), so a gang's every node leaves markers; a one-node job is a batch job (sbatch's kind: Slurm
requeues those when their node fails).
"""
from __future__ import annotations

import dataclasses
import random
from pathlib import Path

BEAT_S = 0.2

SCRIPT = r"""#!/bin/bash
marks="$1"; beats="$2"
devices="${CUDA_VISIBLE_DEVICES:--}"
file="$marks/$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}.$SLURM_NODEID.$$.marker"
echo "start $SLURM_JOB_ID ${SLURM_RESTART_COUNT:-0} $SLURMD_NODENAME $SLURM_NODEID $$ $devices $EPOCHREALTIME" > "$file"
for ((i = 0; i < beats; i++)); do
  sleep %(beat)s
  echo "beat $EPOCHREALTIME" >> "$file"
done
echo "end $EPOCHREALTIME" >> "$file"
""" % {"beat": BEAT_S}


@dataclasses.dataclass(frozen=True)
class JobShape:
    nodes: int
    gpus_per_node: int
    beats: int  # how long it works: beats * BEAT_S

    def body(self, marks: Path, workdir: Path, user: str) -> dict:
        """The REST body that submits this job."""
        return {
            "name": "chaos", "script": SCRIPT, "script_args": [str(marks), str(self.beats)],
            "workdir": str(workdir), "user": user, "nodes": self.nodes, "ntasks_per_node": 1,
            "gpus_per_node": self.gpus_per_node, "time_limit_s": 600,
            "output": str(workdir / "out" / "%j.%t.out"), "env": {"PATH": "/usr/bin:/bin"},
            "batch": self.nodes == 1,
        }


def random_shapes(rng: random.Random, count: int, max_nodes: int, gpus_per_node: int) -> list[JobShape]:
    """Mostly one-node jobs of 1..all GPUs, some gangs, lasting 1 to 8 s; one in five lasts 16 to 24 s, longer
    than the node timeout (tests/chaos/cluster.py), so that a run written off with its node could still be
    alive when the job runs again (the checker's `twice`, which self-fencing prevents)."""
    shapes = []
    for _ in range(count):
        nodes = 1 if rng.random() < 0.8 else rng.randint(2, max(2, max_nodes // 2))
        beats = rng.randint(5, 40) if rng.random() < 0.8 else rng.randint(80, 120)
        shapes.append(JobShape(min(nodes, max_nodes), rng.choice([1, 1, 2, 4, gpus_per_node]), beats))
    return shapes
