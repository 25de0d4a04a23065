"""Machine CPU per task start and await of `true`: through a task leader (leaders.begin_task ... wait, the
agent's path, decision 0022) against a plain `asyncio.create_subprocess_exec` in the same process (what a
task cost before leaders). Each way runs in a process of its own inside a CPU-accounting cgroup
(throughput.CpuGroup), so the factory, the leaders and the tasks, reaped by nobody who counts them, are in
its figure and the others' work on a shared machine is not.

With `--base REV` the leader way also runs with the source of a git revision (exported with `git archive`,
its leader built from that revision's task_leader.c), the ways taking turns round by round, so before and
after see the same load.

    python bench/leader_start.py --tasks 300 --rounds 3 --base 393ac09"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import CpuGroup  # noqa: E402

WAYS = ("leader", "subprocess")


async def _through_leader(exit_dir: Path) -> None:
    from corral.agent.leaders import begin_task
    starting = begin_task(["true"], cwd="/", env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, user=None, exit_dir=exit_dir)
    task = await starting.result()
    task.confirm(recorded=True)
    if await task.wait() != 0:
        raise SystemExit("true did not exit 0 through its leader")
    task.forget()


async def _plain(_: Path) -> None:
    process = await asyncio.create_subprocess_exec("true", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL, start_new_session=True)
    if await process.wait() != 0:
        raise SystemExit("true did not exit 0")


def measure_one(way: str, tasks: int) -> dict:
    """One way, in this process: `tasks` starts and awaits of `true`, one after the other."""
    start = _through_leader if way == "leader" else _plain
    with tempfile.TemporaryDirectory(prefix="leader-start-") as tmp, CpuGroup() as group:
        if group.usage_s() is None:
            raise SystemExit("leader_start: needs a CPU-accounting cgroup (root, cgroup v2 or v1 cpuacct)")

        async def run(count: int) -> None:
            for _ in range(count):
                await start(Path(tmp))

        asyncio.run(run(5))  # the factory starts at the first task: not a task's cost
        cpu0, wall0, parts0 = group.usage_s() or 0.0, time.perf_counter(), _parts(way)
        asyncio.run(run(tasks))
        cpu1, wall1, parts1 = group.usage_s() or 0.0, time.perf_counter(), _parts(way)
        if way == "leader":
            from corral.agent.leaders import leader_factory
            leader_factory().close()

    def per_task_ms(seconds: float) -> float:
        return round(seconds / tasks * 1000, 3)

    parts = {name: per_task_ms(parts1[name] - parts0[name]) for name in parts1}
    # What no process that counts it reaps: the leaders and their tasks (the leader way; the plain way's
    # tasks are this process's waited children).
    parts["unreaped"] = round(per_task_ms(cpu1 - cpu0) - sum(parts.values()), 3)
    return {"way": way, "tasks": tasks, "cpu_ms_per_task": per_task_ms(cpu1 - cpu0),
            "wall_ms_per_task": per_task_ms(wall1 - wall0), "parts_ms_per_task": parts}


def _parts(way: str) -> dict[str, float]:
    """CPU seconds so far of this process (the agent's side), its waited children (the plain way's tasks)
    and, for the leader way, the leader factory (its leaders it does not wait for: SIGCHLD ignored)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    parts = {"agent_side": own.ru_utime + own.ru_stime, "waited_children": children.ru_utime + children.ru_stime}
    if way == "leader":
        from corral.agent.leaders import leader_factory
        # schedstat's time on CPU, in ns: cpu_times' clock ticks are too coarse for a small process
        parts["factory"] = int(Path(f"/proc/{leader_factory().pid}/schedstat").read_text().split()[0]) / 1e9
    return parts


def export_base(revision: str, into: Path) -> Path:
    """`revision`'s src tree under `into`, its leader built beside its source."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "src"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    agent = into / "src" / "corral" / "agent"
    subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), "-C", str(into), "src/corral/agent/corral-task-leader"],
                   check=True)
    if not (agent / "corral-task-leader").exists():
        raise SystemExit(f"leader_start: {revision}'s leader was not built")
    return into / "src"


def _run_child(way: str, tasks: int, source: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(source)}
    out = subprocess.run([sys.executable, __file__, "--one", way, "--tasks", str(tasks)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", help="a git revision whose leader path is measured too, taking turns")
    parser.add_argument("--one", choices=WAYS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one, args.tasks)), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="leader-start-base-") as tmp:
        ways = [("leader", ROOT / "src", "change"), ("subprocess", ROOT / "src", "plain")]
        if args.base:
            ways.insert(0, ("leader", export_base(args.base, Path(tmp)), "base"))
        for round_no in range(1, args.rounds + 1):
            for way, source, label in ways:
                load = os.getloadavg()[0]
                result = _run_child(way, args.tasks, source)
                print(json.dumps({"round": round_no, "code": label, "load_before": round(load, 2), **result}),
                      flush=True)


if __name__ == "__main__":
    main()
