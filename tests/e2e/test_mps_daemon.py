"""End to end: an agent whose PATH has a (stand-in) `nvidia-cuda-mps-control` starts the MPS daemon before a
`--gres=shard:N` job's tasks and stops it when the job ends; a whole-GPU job leaves it alone."""
from __future__ import annotations

import os

import pytest

from tests.e2e.harness import Cluster, wait_for
from tests.slurm.commands import Commands

pytestmark = pytest.mark.slow


def test_the_agent_starts_mps_for_a_share_job_and_stops_it_after(tmp_path):
    record = tmp_path / "mps-calls"
    bin_dir = tmp_path / "mps-bin"
    bin_dir.mkdir()
    program = bin_dir / "nvidia-cuda-mps-control"
    program.write_text(f'#!/bin/sh\nif [ "$1" = "-d" ]; then echo start >> {record}; '
                       f'else read command; echo "$command" >> {record}; fi\n')
    program.chmod(0o755)
    cluster = Cluster(tmp_path, nodes=1, gpus=1)
    try:
        cluster.start_controller()
        cluster.start_agent("node1", env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
        wait_for(lambda: any(n["state"] != "down" for n in cluster.nodes()), message="agent registered")
        cmd = Commands(cluster, tmp_path)
        whole = cmd.submit("--gres=gpu:1", "-o", "/dev/null", "--wrap", "true")
        cluster.wait_state(int(whole), "COMPLETED")
        assert not record.exists(), "a whole-GPU job starts no MPS daemon"
        seen = tmp_path / "seen"
        share = cmd.submit("--gres=shard:2", "-o", "/dev/null", "--wrap", f"cat {record} > {seen}")
        cluster.wait_state(int(share), "COMPLETED")
        assert seen.read_text().split() == ["start"], "started before the job's tasks"
        wait_for(lambda: record.read_text().split() == ["start", "quit"], message="the daemon stopped")
    finally:
        cluster.stop()
