"""`corral queue --watch` as a real process (a terminal and a pipe), and what an empty queue says."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sysconfig
import time
from pathlib import Path

from .standin import SECRET

CORRAL = Path(sysconfig.get_path("scripts")) / "corral"
CLEAR = b"\x1b[2J"


def start_watch(standin, stdout) -> subprocess.Popen:
    env = {**os.environ, "CORRAL_URL": standin.url, "CORRAL_SECRET": SECRET, "COLUMNS": "200"}
    return subprocess.Popen([str(CORRAL), "queue", "--watch", "--interval", "0.2"], stdout=stdout,
                            stderr=subprocess.PIPE, env=env)


def read_until(fd: int, wanted: bytes, count: int, timeout_s: float = 30.0) -> bytes:
    """What `fd` gives until `wanted` has appeared `count` times."""
    data, deadline = b"", time.monotonic() + timeout_s
    while data.count(wanted) < count:
        assert time.monotonic() < deadline, data.decode(errors="replace")
        if select.select([fd], [], [], 0.5)[0]:
            data += os.read(fd, 65536)
    return data


def interrupt(process: subprocess.Popen) -> tuple[int, str]:
    process.send_signal(signal.SIGINT)  # Ctrl-C
    _, stderr = process.communicate(timeout=30)
    return process.returncode, stderr.decode()


def test_watch_on_a_terminal_clears_and_redraws_until_ctrl_c(standin):
    leader, follower = os.openpty()
    process = start_watch(standin, follower)
    os.close(follower)
    try:
        screens = read_until(leader, CLEAR, 3).split(CLEAR)
    finally:
        code, stderr = interrupt(process)
        os.close(leader)
    assert b"Every 0.2s: corral queue" in screens[1]
    assert b"JOBID" in screens[1] and b"train" in screens[1]
    assert code == 0 and stderr == ""


def test_watch_into_a_pipe_prints_each_round_without_escapes(standin):
    process = start_watch(standin, subprocess.PIPE)
    try:
        output = read_until(process.stdout.fileno(), b"Every 0.2s: corral queue", 3)
    finally:
        code, stderr = interrupt(process)
    assert CLEAR not in output and b"\x1b" not in output
    assert output.count(b"JOBID") >= 2
    assert code == 0 and "Traceback" not in stderr and "Aborted" not in stderr


def test_watch_keeps_going_when_the_controller_is_away(isolated):
    env = {**os.environ, "CORRAL_URL": "http://127.0.0.1:9", "COLUMNS": "200"}
    process = subprocess.Popen([str(CORRAL), "queue", "-w", "-n", "0.2"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env)
    try:
        read_until(process.stdout.fileno(), b"Every 0.2s", 3)
    finally:
        code, stderr = interrupt(process)
    assert code == 0
    assert stderr.count("corral: error: cannot reach the controller at http://127.0.0.1:9") >= 2


def test_empty_queue_says_where_finished_jobs_are(standin, cli):
    standin.state.jobs = {job_id: job for job_id, job in standin.state.jobs.items() if job["state"] == "COMPLETED"}
    result = cli("queue")
    assert result.exit_code == 0
    assert result.stdout == "No pending or running jobs (finished jobs: corral queue --all or corral acct).\n"
    assert cli("queue", "-u", "bob").stdout.startswith("No pending or running jobs match (finished jobs:")
    assert cli("queue", "--all").stdout.splitlines()[1].split()[:5] == ["3", "gpu", "old", "alice", "COMPLETED"]
    assert cli("queue", "--all", "-u", "carol").stdout == "No jobs match.\n"
    assert cli("queue", "--json").stdout == "[]\n"
    assert "--all" in cli("queue", "--help").stdout.split("Options:")[0]  # the description names it
