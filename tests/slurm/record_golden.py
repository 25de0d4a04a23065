"""Re-create the golden fixtures in tests/slurm/golden/ from real Slurm 22.05.

Run on a machine where real Slurm is up (/work/shared/anchors/slurm/setup.sh) and its commands are
/usr/bin/sbatch etc.:  python tests/slurm/record_golden.py   (about two minutes: it waits for a job
to hit its one-minute time limit).

Each fixture is {"argv", "stdin", "stdout", "stderr", "exit_code", "notes", "phase", "started_at",
"finished_at", "roles"}. `roles` maps scenario names to the job ids this recording got. The phase
snapshots (context_<phase>.json: `scontrol show job -o`, `sacct -P` with steps, nodes, partitions) let
the tests build corral records equivalent to the recorded jobs. Other users of the same Slurm may
add jobs at any time, so every squeue/sacct invocation names our job ids explicitly.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden"
WORKDIR = Path("/tmp/corral-golden")  # fixed, so WorkDir and StdOut paths repeat between recordings
BIN = "/usr/bin"
STEP_SCRIPT = "#!/bin/bash\n#SBATCH -J steps\n#SBATCH --ntasks=2\n#SBATCH -t 5\nsrun hostname\nsrun true\n"
STDIN_SCRIPT = "#!/bin/sh\n#SBATCH --job-name=fromstdin\n#SBATCH --time=2\ntrue\n"
SACCT_CONTEXT_FIELDS = (
    "JobID,JobIDRaw,JobName,State,ExitCode,DerivedExitCode,Elapsed,ElapsedRaw,NodeList,Start,End,Submit,"
    "Eligible,AllocTRES,ReqTRES,Reason,Account,NNodes,NCPUS,NTasks,AllocCPUS,ReqCPUS,ReqMem,Timelimit,"
    "TimelimitRaw,Partition,User,UID,Group,GID,WorkDir,QOS,Comment,WCKey,Priority,Cluster,CPUTimeRAW"
)


def run(argv: list[str], stdin: str | None = None) -> dict:
    started = time.time()
    stdin_kwargs = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    # argv[0] stays the bare name: glibc's getopt messages start with it ("sbatch: invalid option").
    proc = subprocess.run(argv, executable=f"{BIN}/{argv[0]}", **stdin_kwargs, capture_output=True, text=True,
                          cwd=WORKDIR, env={**os.environ, "TZ": "UTC"}, check=False)  # the tests read UTC
    return {"argv": argv, "stdin": stdin, "stdout": proc.stdout, "stderr": proc.stderr,
            "exit_code": proc.returncode, "started_at": started, "finished_at": time.time()}


class Recorder:
    def __init__(self) -> None:
        self.roles: dict[str, int] = {}
        self.phase = "submit"
        self.count = 0

    def save(self, name: str, result: dict, notes: str) -> dict:
        fixture = {**result, "notes": notes, "phase": self.phase, "roles": dict(self.roles)}
        (GOLDEN / f"{name}.json").write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
        self.count += 1
        return fixture

    def record(self, name: str, argv: list[str], notes: str, stdin: str | None = None) -> dict:
        return self.save(name, run(argv, stdin), notes)

    def submit(self, role: str, argv: list[str], notes: str, stdin: str | None = None,
               fixture: str | None = None) -> int:
        result = run(argv, stdin)
        if result["exit_code"] != 0:
            sys.exit(f"submitting {role} failed: {result['stderr']}")
        self.roles[role] = int(result["stdout"].split()[-1].split(";")[0])
        if fixture:
            self.save(fixture, result, notes)
        return self.roles[role]

    def ids(self, *roles: str) -> str:
        return ",".join(str(self.roles[r]) for r in (roles or self.roles))

    def snapshot(self, name: str) -> None:
        jobs = [run(["scontrol", "show", "job", "-o", str(i)])["stdout"] for i in self.roles.values()]
        sacct = run(["sacct", "-P", "-o", SACCT_CONTEXT_FIELDS, "-j", self.ids()])["stdout"]
        context = {
            "phase": self.phase, "taken_at": time.time(), "roles": dict(self.roles),
            "scontrol_jobs": "".join(jobs), "sacct": sacct,
            "nodes": run(["scontrol", "show", "node", "-o"])["stdout"],
            "partitions": run(["scontrol", "show", "partition", "-o"])["stdout"],
        }
        (GOLDEN / f"context_{name}.json").write_text(json.dumps(context, indent=1, sort_keys=True) + "\n")


def submit_scenarios(r: Recorder) -> None:
    (WORKDIR / "steps.sh").write_text(STEP_SCRIPT)
    r.submit("timeout", ["sbatch", "-J", "tmo", "-t", "0:05", "--wrap", "sleep 300"],
             "-t 0:05 is rounded up to one minute; the job ends TIMEOUT", fixture="sbatch_wrap")
    r.submit("twonode", ["sbatch", "--parsable", "-N2", "--gres=gpu:2", "-J", "twonode", "-t", "10", "--wrap",
                         "srun sleep 45"], "--parsable prints only the id", fixture="sbatch_parsable")
    r.submit("steps", ["sbatch", "steps.sh"], "script file with #SBATCH lines; two srun steps",
             fixture="sbatch_script_file")
    r.submit("stdin", ["sbatch"], "script read from stdin", stdin=STDIN_SCRIPT, fixture="sbatch_stdin")
    r.submit("array", ["sbatch", "--array=0-9%2", "-J", "arr", "-t", "5", "--wrap", "sleep 20"],
             "array with a throttle of 2", fixture="sbatch_array")
    r.submit("failed", ["sbatch", "-J", "fail3", "--wrap", "exit 3"], "")
    r.submit("held", ["sbatch", "-H", "-J", "held", "--wrap", "true"], "")
    r.submit("cancelled", ["sbatch", "-J", "cancelme", "--wrap", "sleep 300"], "")
    r.submit("resources", ["sbatch", "-N4", "--gres=gpu:8", "-J", "big", "--wrap", "true"], "")
    r.submit("priority", ["sbatch", "-N4", "--gres=gpu:8", "-J", "big2", "--wrap", "true"], "")
    r.record("sbatch_invalid_option", ["sbatch", "--bogus", "--wrap", "true"], "glibc getopt message, exit 255")
    r.record("sbatch_invalid_short", ["sbatch", "-Y", "--wrap", "true"], "glibc getopt message, exit 255")
    r.record("sbatch_ambiguous", ["sbatch", "--s=1", "--wrap", "true"], "ambiguous prefix, exit 255")
    r.record("sbatch_missing_value", ["sbatch", "-J"], "missing argument, exit 255")
    r.record("sbatch_invalid_partition", ["sbatch", "-p", "nosuch", "--wrap", "true"], "rejected by slurmctld")
    r.record("sbatch_invalid_time", ["sbatch", "--time=abc", "--wrap", "true"], "")
    r.record("sbatch_no_shebang", ["sbatch"], "script without #! on stdin", stdin="echo hi\n")


SQUEUE_LONG = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"


def queue_scenarios(r: Recorder) -> None:
    mine = r.ids()
    r.record("squeue_default", ["squeue", "--jobs", mine], "default format; finished jobs are not listed")
    r.record("squeue_long", ["squeue", "-l", "-j", mine], "first line is the time of the query")
    r.record("squeue_noheader", ["squeue", "-h", f"--jobs={mine}"], "")
    r.record("squeue_format_default_spelled", ["squeue", "-o", SQUEUE_LONG, "-j", mine], "same as default")
    r.record("squeue_format_plain", ["squeue", "-o", "%i %A %T %t %j", "-j", mine], "no widths: no padding")
    r.record("squeue_format_widths", ["squeue", "--format=%5i|%.3T|%20R|%.4M|%-4D|%10j|%.10j", "-j", mine],
             "widths, truncation, and '-' which squeue does not support")
    r.record("squeue_format_letters",
             ["squeue", "-o", "%i %A %F %K %P %j %u %U %t %T %M %l %L %D %C %R %r %N %Q %V %S %e %a %g %k %o "
              "%Z %E %b %q %w", "-j", mine], "most single-letter fields")
    r.record("squeue_Format", ["squeue", "-O", "JobID,JobArrayID,Name:12,State:.10,NumNodes:6,TimeUsed,ReasonList",
                               "-j", mine], "long format: 20 columns by default, no separator")
    r.record("squeue_array", ["squeue", "-j", r.ids("array")], "pending remainder collapsed: A_[a-b%N]")
    r.record("squeue_array_r", ["squeue", "-r", "-j", r.ids("array")], "-r: one line per array task")
    r.record("squeue_attached_j", ["squeue", f"-j{r.roles['twonode']}"], "-jID: optional argument attached")
    r.record("squeue_unknown_job", ["squeue", "--jobs=999999"], "one unknown id: error, exit 1")
    r.record("squeue_invalid_state", ["squeue", "-t", "bogus"], "")
    r.record("squeue_invalid_option", ["squeue", "--bogus"], "")
    r.record("squeue_ambiguous", ["squeue", "--s"], "")
    r.record("scontrol_show_job_running", ["scontrol", "show", "job", str(r.roles["twonode"])], "")
    r.record("scontrol_show_job_array", ["scontrol", "show", "job", str(r.roles["array"])],
             "the pending remainder and every task record")
    r.record("scontrol_show_job_held", ["scontrol", "show", "job", str(r.roles["held"])], "")
    r.record("scontrol_show_job_unknown", ["scontrol", "show", "job", "999999"], "")
    r.record("sacct_running", ["sacct", "-j", mine], "while running/pending: None assigned, Unknown end")
    r.record("sacct_array_pending", ["sacct", "-P", "-X", "-o", "JobID,JobIDRaw,State,NodeList", "-j",
                                     r.ids("array")], "collapsed pending remainder")


def cluster_scenarios(r: Recorder) -> None:
    r.record("sinfo_default", ["sinfo"], "node states depend on what runs at that moment")
    r.record("sinfo_partition", ["sinfo", "-o", "%P"], "")
    r.record("sinfo_cpus", ["sinfo", "-o", "%C"], "")
    r.record("sinfo_format", ["sinfo", "-o", "%P %a %l %D %t %T %N %C %G %c %m"], "")
    r.record("sinfo_node_long", ["sinfo", "-N", "-l"], "first line is the time of the query")
    r.record("scontrol_show_partition", ["scontrol", "show", "partition"], "")
    r.record("scontrol_show_node", ["scontrol", "show", "node", "node1"], "")
    r.record("scontrol_show_config", ["scontrol", "show", "config"], "compare the first lines only")
    r.record("scontrol_show_hostnames", ["scontrol", "show", "hostnames", "node[1-3]"], "")
    r.record("scontrol_show_hostname_prefix", ["scontrol", "show", "hostname", "node[1-2],x"], "")
    r.record("scontrol_show_hostlist", ["scontrol", "show", "hostlist", "node1,node2,node3"], "")
    r.record("scontrol_invalid_keyword", ["scontrol", "bogus"], "")
    r.record("scancel_unknown", ["scancel", "999999"], "unknown id without filters: silent, exit 0")
    r.record("scancel_unknown_signal", ["scancel", "999999", "--signal", "USR2"], "with --signal: error, exit 1")
    r.record("scancel_bad_signal", ["scancel", "--signal=BOGUS", "1"], "")
    r.record("scancel_no_id", ["scancel"], "")


def cancel_waiting_jobs(r: Recorder) -> None:
    r.record("scancel_running", ["scancel", str(r.roles["cancelled"])], "cancel a running job: silent")
    run(["scancel", r.ids("held", "resources", "priority")])


def wait_until_done(r: Recorder, limit_s: float = 170) -> None:
    deadline = time.time() + limit_s
    while time.time() < deadline:
        states = run(["sacct", "-n", "-X", "-P", "-o", "State", "-j", r.ids()])["stdout"].split()
        if states and not any(s in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED") for s in states):
            return
        time.sleep(3)
    sys.exit(f"jobs still active after {limit_s} s")


def final_scenarios(r: Recorder) -> None:
    mine = r.ids()
    submitit_argv = ["sacct", "-o", "JobID,State,NodeList", "--parsable2"]
    for role in ("twonode", "array", "held", "failed"):
        submitit_argv += ["-j", str(r.roles[role])]
    r.record("sacct_default", ["sacct", "-j", mine], "default fields, with steps")
    r.record("sacct_submitit", submitit_argv, "submitit's call: repeated -j, parsable2")
    r.record("sacct_parsable2", ["sacct", "-P", "-j", mine, "--format=JobID,JobName,State,ExitCode,NodeList"], "")
    r.record("sacct_parsable", ["sacct", "-p", "-j", mine, "-o", "JobID,State,ExitCode"], "trailing |")
    r.record("sacct_noheader", ["sacct", "-n", "-X", "-j", mine], "")
    r.record("sacct_allocations", ["sacct", "-X", "-j", mine, "-o", "jobid,jobidraw,state,exitcode"],
             "lower-case names still print canonical headers")
    r.record("sacct_format", ["sacct", "-j", mine, "--format=JobID,JobName%20,State,ExitCode,Elapsed,NodeList"], "")
    r.record("sacct_truncation", ["sacct", "-X", "-j", mine, "-o", "JobID%-6,State%8,JobName%4,NodeList%5"],
             "overlong values are cut to N-1 characters plus +")
    r.record("sacct_delimiter", ["sacct", "-X", "-P", "--delimiter=,", "-j", mine, "-o", "JobID,State"], "")
    r.record("sacct_times", ["sacct", "-X", "-j", mine, "-o", "JobID,Submit,Start,End,Elapsed,Timelimit,NNodes,"
                             "NCPUS,AllocTRES%40,Partition,Account,User"], "")
    r.record("sacct_junk", ["sacct", "-j", str(r.roles["failed"]), "junk", "more"], "positionals: exit 1")
    r.record("sacct_invalid_field", ["sacct", "-o", "bogusfield", "-j", mine], "")
    r.record("squeue_all_states", ["squeue", "-t", "all", "-j", mine], "finished jobs until MinJobAge")
    r.record("squeue_finished_single", ["squeue", "-j", str(r.roles["failed"])],
             "one id of a finished job still in memory: header only, exit 0")


def main() -> None:
    WORKDIR.mkdir(parents=True, exist_ok=True)
    if run(["sinfo", "-h", "-o", "%P"])["exit_code"] != 0:
        sys.exit("real Slurm is not running: bash /work/shared/anchors/slurm/setup.sh")
    GOLDEN.mkdir(exist_ok=True)
    r = Recorder()
    submit_scenarios(r)
    time.sleep(3)  # let the scheduler start what fits
    r.phase = "queue"
    r.snapshot("queue")
    queue_scenarios(r)
    cluster_scenarios(r)
    r.snapshot("queue_after")  # the tests check that nothing they compare moved during the phase
    cancel_waiting_jobs(r)
    r.phase = "final"
    wait_until_done(r)
    time.sleep(2)  # accounting records reach slurmdbd shortly after the job ends
    r.snapshot("final")
    final_scenarios(r)
    print(f"recorded {r.count} fixtures in {GOLDEN}")


if __name__ == "__main__":
    main()
