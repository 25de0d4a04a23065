"""Self-fencing (decision 0017): once the agent has been without contact with the controller for the
registration reply's fence_after_s, the node's task leaders SIGKILL its tasks (and what they left in their
cgroup), whether the agent is alive but cut off or dead; the end is recorded as fenced and reported when
contact returns. Real agent processes against the fake controller."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.protocol import NodeStarted
from tests.agent.test_adoption import agents as agent_processes  # noqa: F401 - a fixture: real agents
from tests.agent.test_adoption import alive, sigkill
from tests.agent.test_confinement import cgroup_tree as agent_cgroups  # noqa: F401 - a fixture: a cgroup2 tree
from tests.agent.test_confinement import gpu_files  # noqa: F401 - the fixture cgroup_tree uses

FENCE_AFTER_S = 2.0
SLACK_S = 1.0  # a leader looks every fence_after_s / 8; the kill and the test's own polling take the rest


def start_job(controller, request, make_launch, script: str = "exec sleep 300"):
    controller.fence_after_s = FENCE_AFTER_S
    agent = request.getfixturevalue("agent_processes")()
    controller.wait(lambda: controller.polls, timeout_s=10)
    controller.send(make_launch(job_id=31, argv=["sh", "-c", script]))
    (started,) = controller.wait(lambda: controller.events_of(NodeStarted, 31), timeout_s=10)
    (Path(make_launch().workdir) / "pgid").write_text(str(started.pids[0]))
    return agent, started.pids[0]


def died_within(pid: int, timeout_s: float) -> float | None:
    """When (time.monotonic()) `pid` was seen gone, if within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return time.monotonic()
        time.sleep(0.02)
    return None


def test_a_task_runs_on_while_contact_lasts_and_is_fenced_once_it_is_lost(controller, request, make_launch):
    agent, task = start_job(controller, request, make_launch)
    time.sleep(2 * FENCE_AFTER_S)
    assert alive(task), "a healthy agent's contact is never older than fence_after_s"

    controller.stop()  # cut off: every request is refused
    cut = time.monotonic()
    died = died_within(task, FENCE_AFTER_S + SLACK_S)
    assert died is not None, f"the task outlived {FENCE_AFTER_S} s without contact"
    # The contact is the send time of the last answered poll, up to one poll wait (0.5 s) before the cut.
    assert died - cut > FENCE_AFTER_S - 0.5 - 0.3, "fenced only once the contact is fence_after_s old"
    assert agent.poll() is None, "the agent itself runs on"

    controller.start()  # contact again: the end goes out, as a fenced one
    finished = controller.wait(lambda: controller.finished(31), timeout_s=10)
    assert [(t.exit_code, t.signal) for t in finished.tasks] == [(0, 9)]
    assert finished.fenced is not None and finished.fenced.startswith("lost contact with the controller for ")
    assert finished.restart_count == 0


def test_the_leader_of_a_dead_agent_fences_its_task(controller, request, make_launch, tmp_path):
    agent, task = start_job(controller, request, make_launch)
    sigkill(agent)  # and never started again
    killed = time.monotonic()
    assert alive(task), "a task outlives its SIGKILLed agent (decision 0015)"
    died = died_within(task, FENCE_AFTER_S + SLACK_S)
    assert died is not None, f"the task outlived {FENCE_AFTER_S} s without an agent"
    (record,) = [json.loads(path.read_text()) for path in (tmp_path / "spool" / "tasks").glob("*.exit")]
    assert record["returncode"] == -9 and record["fenced"].startswith("lost contact with the controller")
    assert died - killed > FENCE_AFTER_S - 0.5 - 0.3


def test_without_a_node_timeout_nothing_is_fenced(controller, request, make_launch):
    agent, task = start_job(controller, request, make_launch)
    controller.fence_after_s = None
    controller.stop()
    controller.restart("epoch-2")  # a controller without a node timeout: the agent registers with it
    seen = len(controller.registrations)
    controller.start()
    controller.wait(lambda: controller.registrations[seen:], timeout_s=10)
    controller.stop()
    time.sleep(FENCE_AFTER_S + SLACK_S)
    assert alive(task), "no node timeout: the task runs on, however long the silence"
    assert agent.poll() is None


def test_fencing_kills_what_the_task_left_in_its_cgroup(controller, request, make_launch, tmp_path):
    cgroup_tree = request.getfixturevalue("agent_cgroups")
    controller.fence_after_s = FENCE_AFTER_S
    secret_file = tmp_path / "secret"
    secret_file.write_text("test-secret\n")
    agent = subprocess.Popen(
        [sys.executable, "-m", "corral.agent", "--controller", controller.url, "--secret-file", str(secret_file),
         "--node", "n1", "--gpus", "2", "--cpus", "2", "--mem-mib", "1024", "--spool", str(tmp_path / "spool"),
         "--tasks-as-agent-user", "--cgroup-root", str(cgroup_tree.root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        controller.wait(lambda: controller.polls, timeout_s=10)
        script = (f"setsid sh -c 'echo $$ > {tmp_path}/escaped; exec sleep 300' </dev/null >/dev/null 2>&1 & "
                  f"exec sleep 300")
        controller.send(make_launch(job_id=31, argv=["sh", "-c", script]))
        controller.wait(lambda: (tmp_path / "escaped").exists(), timeout_s=10)
        (started,) = controller.wait(lambda: controller.events_of(NodeStarted, 31), timeout_s=10)
        escaped = int((tmp_path / "escaped").read_text())
        (tmp_path / "pgid").write_text(f"{started.pids[0]} {escaped}")
        sigkill(agent)
        assert died_within(started.pids[0], FENCE_AFTER_S + SLACK_S) is not None
        assert died_within(escaped, 1.0) is not None, "what left the task's session dies with it, in its cgroup"
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        for job in cgroup_tree.root.glob("job_*"):  # whatever a failed run left, and the leader on its way out
            (job / "cgroup.kill").write_text("1")
            deadline = time.monotonic() + 5
            while "populated 1" in (job / "cgroup.events").read_text() and time.monotonic() < deadline:
                time.sleep(0.02)


@pytest.fixture(autouse=True)
def _no_leftover_task(tmp_path):
    """A failing test leaves no task running: the job's process group (the task is its leader) is killed."""
    yield
    for pid in [int(line) for path in tmp_path.glob("pgid*") for line in path.read_text().split()]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
