"""Record the golden fixtures of sprio and of scontrol's job actions (tests/slurm/golden/sprio_*.json and
action_*.json) from real Slurm 22.05; record_golden.py records the others.

sprio lists pending jobs only, so this fills the anchor cluster (4 nodes x 8 GPUs) with one job and
queues more behind it (one niced, one held). Run from the repository root while real Slurm is up:
    python -m tests.slurm.record_golden_more        (about fifteen seconds)
The fixtures have record_golden.py's shape. Every call but the plain `sprio`/`sprio -l` names our
job ids, since other users of the same Slurm may queue jobs at any time."""
from __future__ import annotations

import sys
import time

from tests.slurm.record_golden import WORKDIR, Recorder, run

UNKNOWN_ID = "999999"


def submit_queue(r: Recorder) -> None:
    r.submit("filler", ["sbatch", "-N4", "--gres=gpu:8", "--exclusive", "-J", "filler", "-t", "2", "--wrap",
                        "sleep 60"], "")
    # The niced job first: sorted by priority (-S -y) the two come out the other way round.
    r.submit("niced", ["sbatch", "-J", "niced", "--nice=100", "--gres=gpu:1", "-t", "5", "--wrap", "true"], "")
    r.submit("waiter", ["sbatch", "-J", "waiter", "--gres=gpu:1", "-t", "5", "--wrap", "true"], "")
    r.submit("held", ["sbatch", "-H", "-J", "held", "-t", "5", "--wrap", "true"], "")


def sprio_scenarios(r: Recorder) -> None:
    waiting = r.ids("waiter", "niced")
    r.record("sprio_default", ["sprio"], "columns with a non-zero weight only (here age and fair share)")
    r.record("sprio_long", ["sprio", "-l"], "every column")
    r.record("sprio_jobs", ["sprio", "-j", waiting], "")
    r.record("sprio_long_jobs", ["sprio", "-l", "-j", waiting], "")
    r.record("sprio_weights", ["sprio", "-w"], "the weights line instead of jobs")
    r.record("sprio_long_weights", ["sprio", "-l", "-w"], "")
    r.record("sprio_noheader", ["sprio", "-h", f"--jobs={waiting}"], "")
    r.record("sprio_format", ["sprio", "-o", "%i|%.5Y|%u|%r|%N|%A", "-j", waiting], "explicit format")
    r.record("sprio_normalized", ["sprio", "-n", "-j", waiting], "factors divided by their weights")
    r.record("sprio_normalized_long", ["sprio", "-n", "-l", "-j", waiting], "")
    r.record("sprio_normalized_weights", ["sprio", "-n", "-w"], "")
    r.record("sprio_user", ["sprio", "-u", "root", "-j", waiting], "-u adds the USER column")
    r.record("sprio_sort", ["sprio", "-S", "-y", "-j", waiting], "by priority, descending")
    r.record("sprio_format_invalid", ["sprio", "-o", "%c %n %i %o %.3a|%y", "-j", waiting],
             "unknown letters are dropped with their suffix, after an error line")
    r.record("sprio_invalid_job_id", ["sprio", "-j", "abc"], "")
    r.record("sprio_unknown_job", ["sprio", "-j", UNKNOWN_ID], "no such pending job")
    r.record("sprio_running_job", ["sprio", "-j", str(r.roles["filler"])], "a running job has no factors")
    r.record("sprio_invalid_option", ["sprio", "--bogus"], "")


def scontrol_action_scenarios(r: Recorder) -> None:
    held, running = str(r.roles["held"]), str(r.roles["filler"])
    for action in ("requeue", "hold", "release"):
        r.record(f"action_{action}_unknown", ["scontrol", action, UNKNOWN_ID], "")
    r.record("action_requeue_pending", ["scontrol", "requeue", held], "only a started job can be requeued")
    r.record("action_hold_held", ["scontrol", "hold", held], "holding a held job again is fine")
    r.record("action_requeue_list", ["scontrol", "requeue", f"{held},{UNKNOWN_ID}"],
             "one message per failed id")
    r.record("action_hold_running", ["scontrol", "hold", running],
             "Slurm accepts this (it zeroes the priority of a running job); corral refuses")
    r.record("action_release", ["scontrol", "release", held], "")


def finished_scenarios(r: Recorder) -> None:
    r.submit("norequeue", ["sbatch", "--no-requeue", "-J", "noreq", "-t", "5", "--wrap", "sleep 30"], "")
    r.submit("done", ["sbatch", "-J", "done", "-t", "5", "--wrap", "true"], "")
    time.sleep(4)
    r.record("action_requeue_disabled", ["scontrol", "requeue", str(r.roles["norequeue"])],
             "a job submitted with --no-requeue")
    r.record("action_hold_finished", ["scontrol", "hold", str(r.roles["done"])], "")


def main() -> None:
    WORKDIR.mkdir(parents=True, exist_ok=True)
    if run(["sinfo", "-h", "-o", "%P"])["exit_code"] != 0:
        sys.exit("real Slurm is not running: bash /work/shared/anchors/slurm/setup.sh")
    r = Recorder()
    r.phase = "sprio"
    submit_queue(r)
    time.sleep(3)  # the filler starts; the others wait for Resources
    r.snapshot("sprio")
    sprio_scenarios(r)
    scontrol_action_scenarios(r)
    run(["scancel", r.ids()])
    r.phase = "finished"
    finished_scenarios(r)
    run(["scancel", r.ids()])
    print(f"recorded {r.count} fixtures")


if __name__ == "__main__":
    main()
