"""Self-fencing (decision 0017): once the agent has been without contact with the controller for the
registration reply's fence_after_s, the node's task leaders freeze its tasks (SIGSTOP, with what they left
in their cgroup), whether the agent is alive but cut off or dead; once contact is back they thaw them, and
a job the controller gave away meanwhile is killed while still frozen. Real agent processes against the
fake controller."""
from __future__ import annotations

import contextlib
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
SLACK_S = 1.0  # a leader looks every fence_after_s / 8; the freeze and the test's own polling take the rest
# Counts while it runs (a line every 0.1 s), stops at the file `stop`, and says so if SIGTERM reaches it.
COUNTER = ("trap 'echo term >> {d}/termed; exit 143' TERM; i=0; "
           "while [ ! -e {d}/stop ]; do i=$((i+1)); echo $i > {d}/progress; sleep 0.1; done; exit 3")


def start_job(controller, request, make_launch, script: str = "exec sleep 300"):
    controller.fence_after_s = FENCE_AFTER_S
    agent = request.getfixturevalue("agent_processes")()
    controller.wait(lambda: controller.polls, timeout_s=10)
    controller.send(make_launch(job_id=31, argv=["sh", "-c", script]))
    (started,) = controller.wait(lambda: controller.events_of(NodeStarted, 31), timeout_s=10)
    (Path(make_launch().workdir) / "pgid").write_text(str(started.pids[0]))
    return agent, started.pids[0]


def start_counter(controller, request, make_launch, tmp_path: Path):
    agent, task = start_job(controller, request, make_launch, COUNTER.format(d=tmp_path))
    wait_for(lambda: progress(tmp_path) > 3, 10.0, "the counter never counted")
    return agent, task


def progress(directory: Path) -> int:
    text = (directory / "progress").read_text().strip() if (directory / "progress").exists() else ""
    return int(text) if text.isdigit() else 0


def state(pid: int) -> str:
    """The process's state letter (R, S, T for stopped, ...); "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return ""


def wait_for(predicate, timeout_s: float, failure: str) -> float:
    """When (time.monotonic()) `predicate()` first held; fails the test with `failure` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(0.02)
    pytest.fail(failure)


def assert_stands_still(directory: Path, seconds: float = 1.0) -> int:
    before = progress(directory)
    time.sleep(seconds)
    assert progress(directory) == before, "a frozen task made progress"
    return before


def test_a_lost_contact_freezes_the_task_and_a_restored_one_thaws_it(controller, request, make_launch, tmp_path):
    agent, task = start_counter(controller, request, make_launch, tmp_path)
    time.sleep(2 * FENCE_AFTER_S)
    assert state(task) not in ("T", ""), "a healthy agent's contact is never older than fence_after_s"

    controller.stop()  # cut off: every request is refused
    cut = time.monotonic()
    frozen = wait_for(lambda: state(task) == "T", FENCE_AFTER_S + SLACK_S,
                      f"the task still runs {FENCE_AFTER_S} s after contact was lost")
    # The contact is the send time of the last answered poll, up to one poll wait (0.5 s) before the cut.
    assert frozen - cut > FENCE_AFTER_S - 0.5 - 0.3, "frozen only once the contact is fence_after_s old"
    stood_at = assert_stands_still(tmp_path)
    assert agent.poll() is None, "the agent itself runs on"

    controller.start()  # contact again, with the same controller: it gave nothing away, the task goes on
    wait_for(lambda: progress(tmp_path) > stood_at, 10.0, "the task was not thawed when contact came back")
    assert state(task) not in ("T", "")
    (tmp_path / "stop").touch()
    finished = controller.wait(lambda: controller.finished(31), timeout_s=10)
    assert [(t.exit_code, t.signal) for t in finished.tasks] == [(3, 0)], "the same run ended on its own"
    assert finished.fenced is None and finished.restart_count == 0
    assert not (tmp_path / "termed").exists()


def test_the_leader_of_a_dead_agent_freezes_its_task_and_the_next_agent_thaws_it(controller, request, make_launch,
                                                                                  tmp_path):
    agent, task = start_counter(controller, request, make_launch, tmp_path)
    sigkill(agent)  # started again only after the fencing
    killed = time.monotonic()
    frozen = wait_for(lambda: state(task) == "T", FENCE_AFTER_S + SLACK_S,
                      f"the task still runs {FENCE_AFTER_S} s after its agent died")
    assert frozen - killed > FENCE_AFTER_S - 0.5 - 0.3
    stood_at = assert_stands_still(tmp_path)

    seen = len(controller.registrations)
    request.getfixturevalue("agent_processes")()  # adopts the task, registers: contact again
    (registration, *_) = controller.wait(lambda: controller.registrations[seen:], timeout_s=15)
    assert 31 in registration.running_jobs
    wait_for(lambda: progress(tmp_path) > stood_at, 10.0, "the adopted task was not thawed")
    (tmp_path / "stop").touch()
    finished = controller.wait(lambda: controller.finished(31), timeout_s=10)
    assert [(t.exit_code, t.signal) for t in finished.tasks] == [(3, 0)]


def test_a_job_given_away_meanwhile_is_killed_frozen_and_never_runs_again(controller, request, make_launch,
                                                                          tmp_path):
    agent, task = start_counter(controller, request, make_launch, tmp_path)
    controller.stop()
    wait_for(lambda: state(task) == "T", FENCE_AFTER_S + SLACK_S, "the task was not frozen")
    stood_at = assert_stands_still(tmp_path, 0.5)

    # The controller declared the node down and requeued job 31 (a restart stands in: either way the
    # agent's next request is refused, and its registration is answered "kill 31").
    controller.restart("epoch-2")
    controller.kill_jobs = [31]
    seen = len(controller.registrations)
    controller.start()
    controller.wait(lambda: controller.registrations[seen:], timeout_s=15)
    wait_for(lambda: not alive(task), 10.0, "the disowned task outlived the registration")
    assert progress(tmp_path) == stood_at, "the disowned task ran again before it died"
    assert not (tmp_path / "termed").exists(), "SIGKILLed frozen: no handler of the job ran"
    assert agent.poll() is None
    finished = controller.wait(lambda: controller.finished(31), timeout_s=10)
    assert [(t.exit_code, t.signal) for t in finished.tasks] == [(0, 9)]


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
    assert alive(task) and state(task) != "T", "no node timeout: the task runs on, however long the silence"
    assert agent.poll() is None


def test_fencing_freezes_what_the_task_left_in_its_cgroup(controller, request, make_launch, tmp_path):
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
        wait_for(lambda: state(started.pids[0]) == "T", FENCE_AFTER_S + SLACK_S, "the task was not frozen")
        wait_for(lambda: state(escaped) == "T", 1.0, "what left the task's session runs on, in its cgroup")
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
