"""squeue and sacct let the controller filter and combine an array's pending tasks: they fetch only
what they show, and show exactly what they showed when they filtered the whole list themselves."""
from __future__ import annotations

import time

import pytest

from corral.slurm.common.http import Controller
from corral.slurm.sacct import main as sacct_command
from corral.slurm.sacct.opts import parse_sacct
from corral.slurm.sacct.output import sacct_output
from corral.slurm.squeue import main as squeue_command
from corral.slurm.squeue.opts import parse_squeue
from corral.slurm.squeue.output import squeue_output

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mixed(slurm_cluster):
    """Held (so pending) jobs of two users, an array of six among them, and one job that ran."""
    def submit(user: str, **fields) -> int:
        return slurm_cluster.submit(argv=["true"], gpus=1, output="/dev/null", user=user, **fields)

    ids = {"array": submit("alice", array="0-5", hold=True, name="arr"), "alice": submit("alice", hold=True),
           "bob": submit("bob", hold=True), "bob_array": submit("bob", array="1-3", hold=True), "done": submit("bob")}
    slurm_cluster.wait_state(ids["done"], "COMPLETED")
    return ids


@pytest.mark.parametrize("argv", [
    [], ["-t", "PD"], ["-t", "R"], ["-u", "bob"], ["-u", "alice,bob", "-t", "PENDING"], ["-p", "gpu"], ["-A", "x"],
    ["-t", "all"], ["-t", "CD", "-u", "bob"], ["-r"], ["-r", "-u", "alice"], ["-j", "JOB"], ["-j", "JOB_2"],
])
def test_squeue_fetches_what_it_shows(slurm_cluster, mixed, argv) -> None:
    argv = [a.replace("JOB", str(mixed["array"])) for a in argv]
    controller = Controller(slurm_cluster.url, slurm_cluster.secret)
    options, now = parse_squeue(argv, {}), time.time()
    fetched = squeue_command.fetch_jobs(controller, options, now, "alice")
    everything = controller.accounting(since=now - 300) if "-t" in argv else controller.jobs()
    assert squeue_output(options, fetched, now, "alice") == squeue_output(options, everything, now, "alice")
    shown = squeue_output(options, fetched, now, "alice")[0].count("\n") - 1
    assert len(fetched) <= max(shown, 1) or "-j" in argv


@pytest.mark.parametrize("argv", [["-a"], ["-u", "bob"], ["-a", "-s", "PD"], ["-a", "-s", "CD,R"], ["-a", "-r", "gpu"]])
def test_sacct_fetches_what_it_shows(slurm_cluster, mixed, argv) -> None:
    controller = Controller(slurm_cluster.url, slurm_cluster.secret)
    options, now = parse_sacct([*argv, "-X"], {}), time.time()
    fetched = [job for page in sacct_command.fetch_pages(controller, options, now, "alice") for job in page]
    midnight = time.mktime(time.localtime(now)[:3] + (0, 0, 0, 0, 0, -1))
    everything = controller.accounting(since=midnight, until=now)
    assert sacct_output(options, fetched, now, user="alice") == sacct_output(options, everything, now, user="alice")
    assert len(fetched) == sacct_output(options, fetched, now, user="alice")[0].count("\n") - 2
