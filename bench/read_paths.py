"""The read paths at scale: squeue, sacct, `corral queue` and GET /accounting over 100,000 jobs, and the
controller's memory before and after a restart with the same jobs.

Arrays: starts a real controller (tests/e2e/harness.py) with two registered stand-in nodes of 8
GPUs each (nobody runs their jobs; the node timeout is an hour, so 16 jobs stay RUNNING), then
submits N arrays of 1,000 one-GPU tasks over the API, spread over 10 users, and times, each as a
fresh process: `squeue`, `squeue -t RUNNING`, `squeue -u user3`, `sacct -a` (every job since
midnight), `sacct -u user3`, `corral queue`, `corral queue -t RUNNING`; then GET /accounting of every
job in this process (and how late /health answers meanwhile, i.e. how long the event loop was
blocked). Memory: the controller's resident set (VmRSS) once the submissions are scheduled, and
again after a restart on the same database, before any read.

Singles: S pending jobs that are no arrays (squeue prints each), written to the database through the
Store API before the controller starts; times squeue's listing in this process in parts (fetch and
format), with whole records (the reference, first and last), with rows of the job-line fields, with
rows of squeue's fields (`fields=`, the previous wire format) and with columns of the fields squeue's
default listing reads (`fields=...&columns=true`, what squeue asks now); and `squeue`, `squeue -t RUNNING`,
`squeue -u user3` and `corral queue` as fresh processes. With `--reference-src DIR` (the `src` folder of
an older checkout, e.g. `git archive <commit> src | tar -x -C DIR/..`), each command is also run from that
source against the same controller, taking turns with this one, and the outputs are compared byte for byte.

    python bench/read_paths.py [--arrays N] [--singles S] [--repeat R] [--reference-src DIR]
                                                                        (defaults 100, 100000, 1, none)

Prints one JSON line: seconds per call (the median of R calls), MiB, and the load average before
and after, since other work on the machine moves every figure."""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.harness import API, Cluster, wait_for  # noqa: E402

ARRAY_SIZE = 1000
USERS = 10
NODES = ("bench1", "bench2")
GPUS_PER_NODE = 8
CONFIG = "kill_grace_s = 2\nnode_timeout_s = 3600\n"
SCRIPTS = Path(sysconfig.get_path("scripts"))
COMMANDS = {
    "squeue": ["squeue"],
    "squeue_t_running": ["squeue", "-t", "RUNNING"],
    "squeue_u": ["squeue", "-u", "user3"],
    "sacct_all_users": ["sacct", "-a"],
    "sacct_u": ["sacct", "-u", "user3"],
    "corral_queue": ["corral", "queue"],
    "corral_queue_t_running": ["corral", "queue", "-t", "RUNNING"],
}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmRSS for process {pid}")


def register_nodes(cluster: Cluster) -> None:
    for name in NODES:
        body = {"node": name, "address": "127.0.0.1", "cpus": 64, "mem_mib": 512_000,
                "gpus": [{"index": i} for i in range(GPUS_PER_NODE)]}
        reply = cluster.http.post(f"{API}/agents/register", json=body)
        reply.raise_for_status()


def submit_arrays(cluster: Cluster, arrays: int) -> float:
    started = time.perf_counter()
    for n in range(arrays):
        cluster.submit(argv=["true"], gpus=1, output="/dev/null", array=f"0-{ARRAY_SIZE - 1}",
                       user=f"user{n % USERS}", name=f"bench{n}")
    return time.perf_counter() - started


def settled(cluster: Cluster, running: int) -> None:
    """Wait until the scheduler has started what fits (and so has looked at every job once)."""
    def started() -> bool:
        jobs = cluster.http.get(f"{API}/jobs", params={"states": "RUNNING"}).json()
        return len(jobs) >= running

    wait_for(started, timeout_s=600, interval_s=1.0, message="running jobs")
    time.sleep(2.0)


def timed(argv: list[str], env: dict[str, str], repeat: int, controller_pid: int | None = None) -> dict:
    """Wall seconds (the median of `repeat` calls), and the CPU seconds of the command (user + system, its
    own) and of the controller (`controller_pid`: what it spent meanwhile, its scheduling cycles included),
    also medians: on a loaded machine the CPU tells what a change saved better than the wall time does."""
    times, own_cpu, controller_cpu, lines = [], [], [], 0
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        served_before = cpu_s(controller_pid) if controller_pid else 0.0
        start = time.perf_counter()
        proc = subprocess.run([str(SCRIPTS / argv[0]), *argv[1:]], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=600, check=False)
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        own_cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        controller_cpu.append(cpu_s(controller_pid) - served_before if controller_pid else 0.0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        lines = proc.stdout.count("\n")
    result = {"s": round(statistics.median(times), 3), "cpu_s": round(statistics.median(own_cpu), 3),
              "lines": lines, "out": proc.stdout}
    if controller_pid:
        result["controller_cpu_s"] = round(statistics.median(controller_cpu), 3)
    return result


def cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def accounting_with_health(cluster: Cluster) -> dict:
    """GET /accounting of every job, while another thread asks for /health every 50 ms: the slowest
    /health answer is how long the event loop could not serve anyone."""
    lateness: list[float] = []
    done = threading.Event()

    def probe() -> None:
        import httpx

        with httpx.Client(base_url=cluster.url, timeout=600) as client:
            while not done.is_set():
                start = time.perf_counter()
                client.get(f"{API}/health")
                lateness.append(time.perf_counter() - start)
                time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        start = time.perf_counter()
        reply = cluster.http.get(f"{API}/accounting", timeout=600)
        elapsed = time.perf_counter() - start
        reply.raise_for_status()
        count = len(reply.json())
    finally:
        done.set()
        prober.join()
    return {"s": round(elapsed, 3), "jobs": count, "mib": round(len(reply.content) / 2**20, 1),
            "health_max_s": round(max(lateness), 3)}


def _helper_switch() -> dict[str, str]:
    """CORRAL_COMMAND_HELPER as given to the bench (0: every command runs in its own process, this source's and
    the reference's alike; otherwise this source's may be served by a command helper while the reference's are
    not, which is no comparison of the two)."""
    switch = os.environ.get("CORRAL_COMMAND_HELPER")
    return {} if switch is None else {"CORRAL_COMMAND_HELPER": switch}


def command_env(cluster: Cluster, tmp: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "SLURM_", "SQUEUE_"))}
    env |= _helper_switch()
    env |= {"CORRAL_URL": cluster.url, "CORRAL_SECRET_FILE": str(cluster.secret_file),
            "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache"), "COLUMNS": "200"}
    timed(["squeue", "--version"], env, 1)  # warm the bytecode cache
    return env


def time_commands(env: dict[str, str], repeat: int, names: tuple[str, ...], reference_src: str | None = None,
                  controller_pid: int | None = None) -> dict:
    """Each command as a fresh process; with `reference_src`, also from that source (PYTHONPATH), each call
    right after this one's, and whether both printed the same bytes."""
    result = {}
    for name in names:
        result[name] = timed(COMMANDS[name], env, repeat, controller_pid)
        if reference_src is not None:
            reference_env = {**env, "PYTHONPATH": reference_src}
            result[f"{name}_reference"] = timed(COMMANDS[name], reference_env, repeat, controller_pid)
            result[f"{name}_same_output"] = result[name].pop("out") == result[f"{name}_reference"].pop("out")
        else:
            result[name].pop("out")
        print(name, result[name], result.get(f"{name}_reference"), file=sys.stderr)
    return result


def measure_arrays(arrays: int, repeat: int) -> dict:
    """Arrays submitted over the API; every read; memory before and after a restart."""
    result: dict = {"jobs": arrays * ARRAY_SIZE}
    with tempfile.TemporaryDirectory(prefix="corral-read-") as tmp:
        cluster = Cluster(Path(tmp), nodes=0, config=CONFIG)
        cluster.start_controller()
        try:
            register_nodes(cluster)
            result["submit_s"] = round(submit_arrays(cluster, arrays), 1)
            settled(cluster, len(NODES) * GPUS_PER_NODE)
            result["rss_mib_submitted"] = rss_mib(cluster.controller.pid)
            print("submitted", result, file=sys.stderr)
            result |= time_commands(command_env(cluster, tmp), repeat, tuple(COMMANDS))
            result["accounting"] = accounting_with_health(cluster)
            cluster.kill_controller()
            started = time.perf_counter()
            cluster.start_controller(timeout_s=600)
            result["restart_s"] = round(time.perf_counter() - started, 1)
            time.sleep(5.0)  # the first cycles after the restore
            result["rss_mib_restarted"] = rss_mib(cluster.controller.pid)
        finally:
            cluster.stop()
    return result


def seed_single_jobs(db: str, count: int) -> None:
    """`count` pending one-GPU jobs of USERS users, none an array, written through the Store API."""
    from corral.core.model import Request
    from corral.engine.records import Job, JobSpec
    from corral.store import Store

    now = time.time()
    env = {"PATH": os.environ["PATH"]}
    with Store.open(db) as store:
        for start in range(1, count + 1, 10_000):
            store.save(jobs=[
                Job(id=i, submit_time=now, spec=JobSpec(
                    name=f"single{i}", user=f"user{i % USERS}", request=Request(gpus_per_node=1, partition="gpu"),
                    argv=("true",), workdir="/tmp", env=env, output="/dev/null"))
                for i in range(start, min(start + 10_000, count + 1))])


def fetch_pages(controller, fields: tuple[str, ...] | None, columns: bool) -> list[dict]:
    """Every job, a page at a time, as whole records, rows or columns (the client's own pager asks for
    columns whenever it names fields; rows are the wire format before them)."""
    from corral.slurm.common.http import PAGE_JOBS, records_of_columns

    query: dict[str, object] = {"combine_arrays": "true", "limit": PAGE_JOBS}
    if fields:
        query["fields"] = ",".join(fields)
    if columns:
        query["columns"] = "true"
    found: list[dict] = []
    after = None
    while True:
        page, headers = controller.exchange("GET", "/jobs", {**query, "after": after})
        if columns:
            found.extend(records_of_columns(fields, page))
        elif fields:
            found.extend(dict(zip(fields, row, strict=True)) for row in page)
        else:
            found.extend(page)
        after = headers.get("x-next-after")
        if after is None:
            return found


def listing_parts(env: dict[str, str], repeat: int, fields: tuple[str, ...] | None, columns: bool = False,
                  pipelined: bool = False, columnar: bool = False) -> dict:
    """squeue's whole listing in this process, in its parts: the controller's answer (building, encoding
    and sending it, and the client's parse: `fetch_s`) and squeue's filtering, sorting and formatting
    (`format_s`); `fields` None is the reference, whole JobOut records as squeue asked before `fields=`;
    `pipelined`: through the commands' own pager, which asks for each next page while decoding the last;
    `columnar`: that pager's columns kept as columns (table.JobColumns) and squeue's listing computed from them
    a column at a time (squeue/columnar.py), as the command does now."""
    from corral.slurm.common.command import connect
    from corral.slurm.squeue.opts import parse_squeue
    from corral.slurm.squeue.output import squeue_output

    controller = connect(env)
    options = parse_squeue([], env)
    fetches, formats, wire = [], [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        if columnar:
            assert fields is not None
            jobs = controller.job_columns("/jobs", {"combine_arrays": True}, fields)
        elif pipelined:
            jobs = controller.jobs(combine_arrays=True, fields=fields)
        else:
            jobs = fetch_pages(controller, fields, columns)
        fetched = time.perf_counter()
        out = squeue_output(options, jobs, time.time())[0]
        fetches.append(fetched - start)
        formats.append(time.perf_counter() - fetched)
        projection = {"fields": ",".join(fields), **({"columns": "true"} if columns else {})} if fields else {}
        reply, _ = controller.exchange("GET", "/jobs", {"limit": 1000, **projection})
        wire = len(json.dumps(reply, separators=(",", ":")))  # as compact as the controller writes it
    return {"fetch_s": round(statistics.median(fetches), 3), "format_s": round(statistics.median(formats), 3),
            "lines": out.count("\n"), "bytes_per_job": round(wire / 1000)}


def measure_singles(count: int, repeat: int, reference_src: str | None = None) -> dict:
    """As many jobs without arrays (nothing to combine: squeue prints every one), seeded in the store.
    Besides the commands, squeue's listing in parts, with whole records (the reference), with rows of
    the fields any job line reads (`corral queue`'s), and of those squeue reads, against the same controller
    in the same run."""
    from corral.slurm.common.http import JOB_LINE_FIELDS
    from corral.slurm.squeue.main import SQUEUE_FIELDS, squeue_fields
    from corral.slurm.squeue.opts import parse_squeue

    result: dict = {"jobs": count}
    with tempfile.TemporaryDirectory(prefix="corral-read-") as tmp:
        cluster = Cluster(Path(tmp), nodes=0, config=CONFIG)
        seed_single_jobs(cluster.db, count)
        cluster.start_controller(timeout_s=600)
        try:
            time.sleep(5.0)  # the first cycles after the restore
            env = command_env(cluster, tmp)
            # The reference first and last, around the rest: the first cycles after the restore (and
            # anything else on the machine) then weigh on both sides alike.
            default_fields = squeue_fields(parse_squeue([], env))
            variants = (("whole_records", None, False, False, False),
                        ("rows_job_line", JOB_LINE_FIELDS, False, False, False),
                        ("rows_squeue", SQUEUE_FIELDS, False, False, False),
                        ("columns_squeue_default", default_fields, True, False, False),
                        ("columns_squeue_default_pipelined", default_fields, True, True, False),
                        ("columns_squeue_default_columnar", default_fields, True, True, True))
            for name, fields, columns, pipelined, columnar in variants:
                result[f"squeue_parts_{name}"] = listing_parts(env, repeat, fields, columns, pipelined, columnar)
                print(name, result[f"squeue_parts_{name}"], file=sys.stderr)
            result |= time_commands(env, repeat, ("squeue", "squeue_t_running", "squeue_u", "corral_queue"),
                                    reference_src, cluster.controller.pid)
            result["squeue_parts_whole_records_again"] = listing_parts(env, repeat, None)
            print("whole_records_again", result["squeue_parts_whole_records_again"], file=sys.stderr)
        finally:
            cluster.stop()
    return result


def measure(arrays: int = 100, singles: int = 100_000, repeat: int = 1, reference_src: str | None = None) -> dict:
    result: dict = {"bench": "read-paths", "repeat": repeat, "machine": f"{platform.node()} cpus={os.cpu_count()}",
                    "loadavg_before": os.getloadavg()[0]}
    if arrays:
        result["arrays"] = measure_arrays(arrays, repeat)
    if singles:
        result["singles"] = measure_singles(singles, repeat, reference_src)
    result["loadavg_after"] = os.getloadavg()[0]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrays", type=int, default=100,
                        help=f"arrays of {ARRAY_SIZE} tasks to submit (0: skip that part)")
    parser.add_argument("--singles", type=int, default=100_000, help="jobs without arrays (0: skip that part)")
    parser.add_argument("--repeat", type=int, default=1, help="calls per command (the median is reported)")
    parser.add_argument("--reference-src", help="an older checkout's src folder: its commands are timed too")
    args = parser.parse_args()
    print(json.dumps(measure(args.arrays, args.singles, args.repeat, args.reference_src)))


if __name__ == "__main__":
    main()
