"""sacct over a million finished jobs on PostgreSQL, with a time window (issue 24, item 4).

Starts a private PostgreSQL (scripts/pg-test-server.sh with a port and data directory of its own, stopped
and deleted at the end), writes N finished jobs into it (10 templates written through the Store API, one
per user, then copied by one INSERT ... SELECT over generate_series, so the spec each row carries matches
its user and account columns), ANALYZEs the table, prints PostgreSQL's plan for the accounting query of a
one-hour window (EXPLAIN ANALYZE: which index it uses, how many rows it reads), then starts a real
controller on that database and times `sacct` as a fresh process: every user's jobs in a one-hour window
and in a one-day window, one user's (`-u`), one account's (`-A`), one state (`--state`).

Jobs are submitted every SPACING_S seconds (N of them span N * SPACING_S), run 60-660 s, and complete or
fail; users user0..user9, accounts acct0..acct2.

    python bench/sacct_million.py [--jobs N] [--repeat R] [--reference-src DIR]   (defaults 1,000,000, 1, none)

With --reference-src, each sacct also runs from that source against this source's controller (taking turns),
then a controller from that source is started on the same database and every command timed again from it
(`<command>_reference_controller`, its output compared with this source's).

Prints one JSON line: seconds per command (the median of R calls), the lines printed, the plan's
summary, and the load average before and after."""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.harness import Cluster, free_port  # noqa: E402

PG_SCRIPT = ROOT / "scripts" / "pg-test-server.sh"
SCRIPTS = Path(sysconfig.get_path("scripts"))
USERS = 10
ACCOUNTS = 3
SPACING_S = 2.0
T0 = 1_700_000_000.0  # the first submission (2023-11-14)
CONFIG = "kill_grace_s = 2\nnode_timeout_s = 3600\n"


def start_postgres(data_dir: Path) -> tuple[str, dict[str, str]]:
    env = {**os.environ, "CORRAL_PG_PORT": str(free_port()), "CORRAL_PG_DIR": str(data_dir)}
    done = subprocess.run([str(PG_SCRIPT)], env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"PostgreSQL did not start: {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1], env


def seed(url: str, count: int) -> float:
    """`count` finished jobs; returns the seconds it took."""
    from sqlalchemy import create_engine, text

    from corral.core.model import Request
    from corral.engine.records import Job, JobSpec, JobState
    from corral.store import Store

    started = time.perf_counter()
    env = {"PATH": "/usr/bin:/bin"}
    templates = [Job(id=i + 1, submit_time=T0, start_time=T0 + 10, end_time=T0 + 70, state=JobState.COMPLETED,
                     spec=JobSpec(name=f"train{i}", user=f"user{i}", account=f"acct{i % ACCOUNTS}",
                                  request=Request(gpus_per_node=1, partition="gpu"), argv=("true",),
                                  workdir="/tmp", env=env, output="/dev/null"))
                 for i in range(USERS)]
    with Store.open(url) as store:
        store.save(jobs=templates)
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as connection:
        columns = [row[0] for row in connection.execute(text(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'jobs' "
            "AND table_schema = current_schema() ORDER BY ordinal_position"))]
        own = {"id": "g", "submit_time": f"{T0} + g * {SPACING_S}", "start_time": f"{T0} + g * {SPACING_S} + 10",
               "end_time": f"{T0} + g * {SPACING_S} + 70 + (g % 600)",
               "state": "CASE WHEN g % 20 = 0 THEN 'FAILED' ELSE 'COMPLETED' END",
               "exit_code": "CASE WHEN g % 20 = 0 THEN 1 ELSE 0 END"}
        chosen = ", ".join(own.get(name, f't."{name}"') for name in columns)
        names = ", ".join(f'"{name}"' for name in columns)
        connection.execute(text(
            f"INSERT INTO jobs ({names}) SELECT {chosen} FROM generate_series({USERS + 1}, {count}) AS g "
            f"JOIN jobs AS t ON t.id = 1 + g % {USERS}"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM ANALYZE jobs"))
    engine.dispose()
    return time.perf_counter() - started


def plan(url: str, since: float, until: float) -> dict:
    """EXPLAIN ANALYZE of the store's accounting query (the first page) for the window, as Store.stream_jobs
    builds it (with the longest span of a finished job read first), of that probe (migration 0008's index), and
    of the first page of the listing's read that the controller makes of it (Store.stream_listed_jobs:
    store/listed.py's, the page's ids chosen first and each spec taken apart by json_to_record)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.dialects import postgresql

    from corral.store.listed import listed_select
    from corral.store.schema import JOBS
    from corral.store.store import _LONGEST_SPAN, select_jobs

    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as connection:
        span = connection.execute(_LONGEST_SPAN).scalar()
        query = select_jobs(start_after=since, end_before=until, limit=10_000, longest_span_s=span)
        sql = str(query.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
        lines = [row[0] for row in connection.execute(text(f"EXPLAIN (ANALYZE, BUFFERS) {sql}"))]
        probe = str(_LONGEST_SPAN.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
        probe_lines = [row[0] for row in connection.execute(text(f"EXPLAIN (ANALYZE, BUFFERS) {probe}"))]
        listed = listed_select(select_jobs(start_after=since, end_before=until, limit=10_000, longest_span_s=span,
                                           columns=(JOBS.c.id,)))
        listed_sql = str(listed.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
        listed_lines = [row[0] for row in connection.execute(text(f"EXPLAIN (ANALYZE, BUFFERS) {listed_sql}"))]
    engine.dispose()
    return {"sql": " ".join(sql.split()), "plan": lines, "longest_span_plan": probe_lines,
            "listed_plan": listed_lines}


def _helper_switch() -> dict[str, str]:
    """CORRAL_COMMAND_HELPER as given to the bench (0: every command runs in its own process, this source's and
    the reference's alike; otherwise this source's may be served by a command helper while the reference's are
    not, which is no comparison of the two)."""
    switch = os.environ.get("CORRAL_COMMAND_HELPER")
    return {} if switch is None else {"CORRAL_COMMAND_HELPER": switch}


def timed(argv: list[str], env: dict[str, str], repeat: int) -> dict:
    times, lines, out = [], 0, ""
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run([str(SCRIPTS / argv[0]), *argv[1:]], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=600, check=False)
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        lines, out = proc.stdout.count("\n"), proc.stdout
    return {"s": round(statistics.median(times), 3), "lines": lines, "out": out}


def clock(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def run_commands(result: dict, root: Path, url: str, commands: dict[str, list[str]], repeat: int,
                 reference_src: str | None, controller_src: str | None = None) -> dict[str, str]:
    """Time each command against a controller on `url` (from `controller_src`, else this source), into `result`;
    with `reference_src`, each also from that source's sacct, taking turns. Returns each command's output."""
    root.mkdir(exist_ok=True)
    cluster = Cluster(root, nodes=0, config=CONFIG, db=url)
    saved_path = os.environ.get("PYTHONPATH")
    if controller_src:
        os.environ["PYTHONPATH"] = controller_src  # the controller's process takes the environment
    try:
        cluster.start_controller(timeout_s=600)
    finally:
        if saved_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved_path
    outputs = {}
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "SLURM_", "SACCT_"))}
        env |= _helper_switch()
        env |= {"CORRAL_URL": cluster.url, "CORRAL_SECRET_FILE": str(cluster.secret_file),
                "PYTHONPYCACHEPREFIX": str(root / "pycache"), "TZ": "UTC"}
        if controller_src:
            env["PYTHONPATH"] = controller_src
        timed(["sacct", "--version"], env, 1)  # the bytecode cache
        reference_env = {**env, "PYTHONPATH": reference_src} if reference_src else None
        if reference_env is not None:
            timed(["sacct", "--version"], reference_env, 1)
        for name, argv in commands.items():
            result[name] = timed(argv, env, repeat)
            if reference_env is not None:  # taking turns with this source, against the same controller
                result[f"{name}_reference"] = timed(argv, reference_env, repeat)
                result[f"{name}_same_output"] = result[name]["out"] == result[f"{name}_reference"].pop("out")
            outputs[name] = result[name]["out"] if controller_src else result[name].pop("out")  # popped by the caller
            print(name, "(reference controller)" if controller_src else "", result[name]["s"], result[name]["lines"],
                  result.get(f"{name}_reference"), file=sys.stderr)
    finally:
        cluster.stop()
    return outputs


def measure(count: int = 1_000_000, repeat: int = 1, reference_src: str | None = None) -> dict:
    result: dict = {"bench": "sacct-million", "jobs": count, "repeat": repeat,
                    "machine": f"{platform.node()} cpus={os.cpu_count()}", "loadavg_before": os.getloadavg()[0]}
    middle = T0 + count * SPACING_S / 2
    hour, day = (middle, middle + 3600), (middle, middle + 86_400)
    with tempfile.TemporaryDirectory(prefix="corral-sacct-") as tmp:
        os.chmod(tmp, 0o755)  # PostgreSQL runs as its own user and keeps its data below
        url, pg_env = start_postgres(Path(tmp) / "pg")
        try:
            result["seed_s"] = round(seed(url, count), 1)
            print("seeded", result["seed_s"], file=sys.stderr)
            result["plan_one_hour"] = plan(url, *hour)
            result["plan_one_day"] = plan(url, *day)
            for window in ("plan_one_hour", "plan_one_day"):
                print(window, "\n".join(result[window]["plan"] + result[window]["longest_span_plan"]
                                         + result[window]["listed_plan"]), file=sys.stderr)
            window = ["-S", clock(hour[0]), "-E", clock(hour[1])]
            commands = {
                "sacct_all_one_hour": ["sacct", "-a", *window],
                "sacct_all_one_day": ["sacct", "-a", "-S", clock(day[0]), "-E", clock(day[1])],
                "sacct_u_one_hour": ["sacct", "-u", "user3", *window],
                "sacct_A_one_hour": ["sacct", "-a", "-A", "acct1", *window],
                "sacct_state_failed_one_hour": ["sacct", "-a", "--state", "FAILED", *window],
            }
            outputs = run_commands(result, Path(tmp), url, commands, repeat, reference_src)
            if reference_src:  # the reference's controller too, on the same database, with the reference's sacct
                reference: dict = {}
                run_commands(reference, Path(tmp) / "reference", url, commands, repeat, None,
                             controller_src=reference_src)
                for name in commands:
                    result[f"{name}_reference_controller"] = reference[name]
                    reference[name]["same_output"] = reference[name].pop("out") == outputs[name]
        finally:
            subprocess.run([str(PG_SCRIPT), "stop"], env=pg_env, capture_output=True, timeout=120, check=False)
    result["loadavg_after"] = os.getloadavg()[0]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="finished jobs in the database")
    parser.add_argument("--repeat", type=int, default=1, help="calls per command (the median is reported)")
    parser.add_argument("--reference-src", help="an older checkout's src folder: each sacct is also run from it "
                        "(PYTHONPATH), right after, and the outputs compared byte for byte; then a controller "
                        "from it on the same database answers its sacct (`*_reference_controller`)")
    args = parser.parse_args()
    print(json.dumps(measure(args.jobs, args.repeat, args.reference_src)))


if __name__ == "__main__":
    main()
