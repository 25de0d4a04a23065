"""End to end: a real controller and three agents, one declaring features (--feature) and one whose GPU
model is discovered through NVML (the pynvml stand-in): sbatch -w, -x, --constraint and --exclusive place
as asked, salloc and srun -w too, and bad choices are refused with Slurm's texts with nothing submitted."""
from __future__ import annotations

import pytest

from tests.e2e.harness import wait_for
from tests.slurm.commands import Commands

pytestmark = pytest.mark.slow

H100 = "NVIDIA H100 80GB HBM3"


def test_nodes_are_chosen_as_asked_live(cluster_factory, tmp_path):
    cluster = cluster_factory(nodes=3, gpus=2, nvml_names={"node3": [H100] * 2},
                              node_features={"node1": "ib,nvme", "node2": "ib"})
    assert {n["name"]: n["features"] for n in cluster.nodes()} == {
        "node1": ["ib", "nvme"], "node2": ["ib"], "node3": ["h100"]}
    cmd = Commands(cluster, tmp_path)
    for args, node in [(["--constraint=h100"], "node3"), (["-C", "ib&nvme"], "node1"), (["-w", "node2"], "node2"),
                       (["-x", "node[1,3]"], "node2"), (["--constraint=nvme|h100", "-x", "node3"], "node1")]:
        job_id = cmd.submit(*args, "-o", "/dev/null", "--wrap", "true")
        job = cluster.wait_state(job_id, "COMPLETED", "FAILED")
        assert (job["state"], job["nodelist"]) == ("COMPLETED", node), args

    # --exclusive: whole nodes. One GPU busy on node1 and node3: the exclusive job gets node2 whole, and
    # a one-GPU job for node2 waits for it although a GPU there is unused by the exclusive job's tasks.
    busy = [cmd.submit("-w", name, "-G", "1", "-o", "/dev/null", "--wrap", "sleep 60") for name in ("node1", "node3")]
    for job_id in busy:
        cluster.wait_state(job_id, "RUNNING")
    # srun --exclusive as a new allocation too (a bare --exclusive was dropped, and the step went beside a job).
    alone = cmd("srun", "--exclusive", "printenv", "SLURMD_NODENAME")
    assert (alone.code, alone.stdout) == (0, "node2\n"), alone
    whole = cmd.submit("--exclusive", "-G", "1", "-o", "/dev/null", "--wrap", "sleep 60")
    running = cluster.wait_state(whole, "RUNNING")
    assert running["nodelist"] == "node2"
    beside = cmd.submit("-w", "node2", "-G", "1", "-o", "/dev/null", "--wrap", "true")
    wait_for(lambda: cluster.job(beside)["reason"] != "None", message="the scheduler looked at the job")
    waiting = cluster.job(beside)
    assert (waiting["state"], waiting["reason"]) in (("PENDING", "Resources"), ("PENDING", "Priority")), waiting
    node2 = next(n for n in cluster.nodes() if n["name"] == "node2")
    assert (node2["gpus_alloc"], node2["cpus_alloc"]) == (2, node2["cpus"]), node2
    scontrol = cmd("scontrol", "show", "node", "node1")
    assert "AvailableFeatures=ib,nvme" in scontrol.stdout, scontrol
    for job_id in (*busy, whole, beside):
        cmd("scancel", str(job_id))

    for args, stderr in [
        (["-w", "node9"], "sbatch: error: Batch job submission failed: Invalid node name specified: node9\n"),
        (["-w", "node[1-2]", "-N", "1"], "sbatch: error: Batch job submission failed: Required nodelist includes "
                                         "more nodes than permitted by max-node count (2 > 1)\n"),
        (["--constraint=infiniband"], "sbatch: error: Batch job submission failed: Invalid feature specification: "
                                      "no node of the partition has infiniband (features: h100, ib, nvme)\n"),
        (["--constraint=[ib|nvme]"], "sbatch: error: Batch job submission failed: Invalid feature specification: "
                                     "'[ib|nvme]': matching OR ([a|b]) is not supported by corral; use a, a&b or "
                                     "a|b\n"),
    ]:
        refused = cmd("sbatch", *args, "--wrap", "true")
        assert (refused.code, refused.stderr) == (1, stderr), args
    # Nothing was half-made: the next job gets the id after the last accepted one.
    assert cmd.submit("-o", "/dev/null", "--wrap", "true") == beside + 1

    # srun as a new allocation with -w, and salloc with -w whose step chooses a node of the allocation.
    pinned = cmd("srun", "-w", "node3", "printenv", "SLURMD_NODENAME")
    assert (pinned.code, pinned.stdout) == (0, "node3\n"), pinned
    # srun -x as a new allocation: its step is not refused for excluding nodes the allocation lacks (it was:
    # "Unable to create step ... Requested node configuration is not available").
    avoided = cmd("srun", "-x", "node[1-2]", "printenv", "SLURMD_NODENAME")
    assert (avoided.code, avoided.stdout) == (0, "node3\n"), avoided
    steps = cmd("salloc", "-N", "2", "-w", "node[1-2]", "srun", "-w", "node2", "-N1", "printenv", "SLURMD_NODENAME")
    assert (steps.code, steps.stdout) == (0, "node2\n"), steps


def test_step_constraint_and_exclude_choose_among_the_allocations_nodes_live(cluster_factory, tmp_path):
    """srun --constraint inside an allocation runs on the allocated nodes with the features; none with
    them is refused at once with Slurm's line (Slurm 22.05 leaves such a step pending for ever) and corral's
    reason; -x of every allocated node gets Slurm's 'Hostlist is empty!'."""
    cluster = cluster_factory(nodes=2, gpus=1, node_features={"node1": "ib,nvme", "node2": "ib"})
    cmd = Commands(cluster, tmp_path)
    # Without -N a step inherits the allocation's node count (SLURM_NNODES), as Slurm's srun does: both nodes.
    script = ("srun -N1 --constraint=nvme printenv SLURMD_NODENAME; "
              "srun --constraint=nvme true; echo \"inherited -N2: $?\"; "
              "srun -C ib -l printenv SLURMD_NODENAME | sort; "
              "srun --constraint=h100 true; echo \"h100: $?\"; "
              "srun -w node2 --constraint=nvme true; echo \"w: $?\"; "
              "srun -x node[1-2] true; echo \"x: $?\"")
    ran = cmd("salloc", "-N", "2", "sh", "-c", script)
    assert ran.code == 0, ran
    assert ran.stdout == "node1\ninherited -N2: 1\n0: node1\n1: node2\nh100: 1\nw: 1\nx: 1\n", ran
    job_id = int(ran.stderr.split("Granted job allocation ")[1].split()[0])
    assert (f"srun: error: Unable to create step for job {job_id}: Requested node configuration is not available\n"
            f"srun: error: no node of job {job_id}'s allocation meets --constraint=h100 (features node1: ib, nvme; "
            "node2: ib)\n") in ran.stderr, ran
    assert "srun: error: 2 node(s) asked, 1 usable in the allocation of job" in ran.stderr, ran
    assert "srun: error: node2 in --nodelist does not meet --constraint=nvme\n" in ran.stderr, ran
    assert "srun: error: Hostlist is empty!  Can't run job.\n" in ran.stderr, ran
    accounted = cmd("sacct", "-j", str(job_id), "-n", "-P", "-o", "JobID,NodeList")
    assert accounted.stdout.splitlines() == [f"{job_id}|node[1-2]", f"{job_id}.0|node1", f"{job_id}.1|node[1-2]"], \
        "only the two steps that fit were made"
