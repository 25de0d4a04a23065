"""A node its agent finds unhealthy (agent/health.py: a fatal XID, ECC errors, the operator's health-check
program) is drained with the agent's reason, as Slurm's HealthCheckProgram drains it, and the gangs running
there are stopped as for a lost node: the job is requeued (every node of the gang killed first), or ends
NODE_FAIL where it may not be requeued. The node stays drained until an operator resumes it."""
from __future__ import annotations

import dataclasses
import signal

from corral.engine.commands import Kill
from corral.engine.records import JobState
from tests.engine.builders import T0, engine_with_nodes, spec

XID_REASON = "XID 79 on GPU 2 (GPU has fallen off the bus)"


def test_an_unhealthy_node_is_drained_and_its_gang_killed_everywhere_then_requeued_elsewhere() -> None:
    engine = engine_with_nodes(count=3)
    job = engine.submit(spec(nodes=2, gpus=4), T0)
    engine.schedule(T0)
    sick, kept = job.node_names
    for node in job.node_names:
        engine.node_started(node, job.id, T0 + 1)
    commands = engine.node_unhealthy(sick, XID_REASON, T0 + 5)
    grace = engine.config.kill_grace_s
    assert sorted(commands, key=lambda c: c.node) == sorted(
        [Kill(job.id, n, signal.SIGTERM, grace, reason="node-failure") for n in (sick, kept)], key=lambda c: c.node), \
        "the sick node's agent is alive: its part is killed too"
    node = engine.nodes[sick]
    assert (node.up, node.drain, node.drain_reason) == (True, True, XID_REASON)
    _, dirty_nodes = engine.take_dirty()
    assert [n.name for n in dirty_nodes] == [sick], "the drain is committed"
    assert (job.state, job.final_state) == (JobState.COMPLETING, JobState.PENDING)
    for node_name in (sick, kept):
        engine.node_finished(node_name, job.id, [(0, 0, signal.SIGTERM)], None, T0 + 6)
    assert (job.state, job.restart_count) == (JobState.PENDING, 1)
    assert job.history[-2].EVENT == "node-failed" and job.history[-2].node == sick
    restarted = engine.schedule(T0 + 7)
    assert sorted(c.node for c in restarted) == sorted(n for n in ("node1", "node2", "node3") if n != sick), \
        "the drained node gets nothing"


def test_a_job_that_may_not_be_requeued_ends_node_fail_on_an_unhealthy_node() -> None:
    engine = engine_with_nodes(count=2)
    job = engine.submit(dataclasses.replace(spec(nodes=2, gpus=4), requeue=False), T0)
    engine.schedule(T0)
    sick = job.node_names[0]
    engine.node_unhealthy(sick, "health check program /usr/sbin/nhc exited 1", T0 + 5)
    for node_name in job.node_names:
        engine.node_finished(node_name, job.id, [(0, 0, signal.SIGTERM)], None, T0 + 6)
    assert (job.state, job.restart_count, job.end_time) == (JobState.NODE_FAIL, 0, T0 + 6)


def test_a_report_again_changes_nothing_and_an_operator_resumes_the_node() -> None:
    engine = engine_with_nodes(count=1)
    engine.node_unhealthy("node1", "ECC: 3 uncorrected errors on GPU 0", T0)
    engine.take_dirty()
    assert engine.node_unhealthy("node1", "ECC: 3 uncorrected errors on GPU 0", T0 + 60) == []
    assert engine.take_dirty() == ([], []), "the same reason again is no change to commit"
    engine.set_drain("node1", False, now=T0 + 61)
    assert (engine.nodes["node1"].drain, engine.nodes["node1"].drain_reason) == (False, "")
    job = engine.submit(spec(gpus=4), T0 + 62)
    engine.schedule(T0 + 62)
    assert job.state is JobState.RUNNING, "a resumed node takes jobs again"


def test_a_report_from_an_unknown_node_changes_nothing() -> None:
    engine = engine_with_nodes(count=1)
    assert engine.node_unhealthy("node9", "XID 48 on GPU 0", T0) == []
    assert "node9" not in engine.nodes


def test_a_launch_refused_by_the_check_before_the_job_requeues_it() -> None:
    """The agent reports the node unhealthy, then the launch it refused (agent.py): the job is requeued,
    not FAILED as a launch failure alone would end it."""
    engine = engine_with_nodes(count=2)
    job = engine.submit(spec(gpus=4), T0)
    engine.schedule(T0)
    sick = job.node_names[0]
    engine.node_unhealthy(sick, "check: GPU memory test failed", T0 + 1)
    engine.node_finished(sick, job.id, [(0, 127, 0)], f"{sick} failed its health check: ...", T0 + 1)
    assert (job.state, job.restart_count) == (JobState.PENDING, 1)
    restarted = engine.schedule(T0 + 2)
    assert [c.node for c in restarted] == [n for n in ("node1", "node2") if n != sick]
