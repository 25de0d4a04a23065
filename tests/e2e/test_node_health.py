"""Issue 14's check for node health: an XID injected into a node's NVML (the pynvml stand-in,
tests/e2e/fake_nvml) while a 2-node gang runs there drains the node with the XID as its reason (GET /nodes,
sinfo -R, scontrol show node) and requeues the gang, which runs again on the healthy nodes."""
from __future__ import annotations

import json
import os
import uuid

import psutil
import pytest

from corral.hostlist import expand
from tests.e2e.harness import wait_for
from tests.slurm.commands import Commands

pytestmark = pytest.mark.slow

H100 = "NVIDIA H100 80GB HBM3"
MARKER = "CORRAL_NODE_HEALTH_TEST"
REASON = "XID 79 on GPU 1 (GPU has fallen off the bus)"


@pytest.fixture
def marker():
    marker = uuid.uuid4().hex
    yield marker
    for proc in psutil.process_iter():  # should the test fail halfway, its tasks must not live on
        try:
            if proc.environ().get(MARKER) == marker:
                proc.kill()
        except psutil.Error:
            pass


def test_an_injected_xid_drains_its_node_and_requeues_the_gang(cluster_factory, tmp_path, marker) -> None:
    nodes = ("node1", "node2", "node3")
    cluster = cluster_factory(nodes=3, config="kill_grace_s = 1\nnode_timeout_s = 15\n",
                              nvml_names={n: [H100] * 2 for n in nodes})
    runs = tmp_path / "runs.txt"
    script = f'#!/bin/sh\necho "${{SLURM_RESTART_COUNT:-0}} $SLURM_JOB_NODELIST" >> {runs}\nexec sleep 300\n'
    job = cluster.submit(script=script, batch=True, nodes=2, gpus_per_node=2,
                         env={"PATH": os.environ["PATH"], MARKER: marker})
    first = expand(cluster.wait_state(job, "RUNNING")["nodelist"])
    wait_for(lambda: runs.exists() and runs.read_text().count("\n") == 1, message="the first run's line")
    sick = first[1]

    cluster.nvml_faults(sick).write_text(json.dumps({"xids": [[1, 79]]}))

    def running_again() -> bool:
        record = cluster.job(job)
        return record["state"] == "RUNNING" and record["restart_count"] == 1

    wait_for(running_again, timeout_s=30, message=f"job {job} running again")
    node = next(n for n in cluster.nodes() if n["name"] == sick)
    assert (node["state"], node["drain_reason"]) == ("drained", REASON), node
    record = cluster.job(job)
    healthy = sorted(set(nodes) - {sick})
    assert expand(record["nodelist"]) == healthy, "the gang left the drained node"
    assert [(h["event"], h.get("node"), h.get("outcome")) for h in record["history"]
            if h["event"] == "node-failed"] == [("node-failed", sick, "requeued")]
    wait_for(lambda: runs.read_text().count("\n") == 2, message="the second run's line")
    assert runs.read_text().splitlines()[1] == f"1 {record['nodelist']}"

    cmd = Commands(cluster, tmp_path)
    sinfo = cmd("sinfo", "-R", "-h", "-o", "%N|%E")
    assert sinfo.stdout == f"{sick}|{REASON}\n", sinfo
    show = cmd("scontrol", "show", "node", sick)
    assert f"Reason={REASON}" in show.stdout, show
    cmd("scancel", str(job))
