"""Per-call latency of corral's sbatch and squeue against real Slurm's.

Starts a local corral cluster (controller and 4 agents x 8 GPUs, tests/e2e/harness.py) and times,
one call after another, N `sbatch -o /dev/null --gres=gpu:1 --wrap true` and then, once the queue
has drained, M `squeue`, each as a fresh process (what a user or a workflow tool pays). The same
calls go to real Slurm's /usr/bin/sbatch and /usr/bin/squeue when its `sinfo` answers (the anchor
in ../shared/anchors/slurm: 4 nodes x 8 GPUs), call for call in turn with corral's. Prints one JSON
line: medians and 90th percentiles and 95th percentiles in milliseconds, the median CPU time (user +
system) of the command's own process, and the ratios corral / Slurm of the medians, of the 95th
percentiles and of the CPU times.
corral's sbatch and squeue are timed three ways, call for call in turn: as installed (`sbatch`, `squeue`:
the native front-end handing the call to the user's warm command helper, the default since decision
0021), the Python entry point in its own process (`sbatch_python`, `squeue_python`:
CORRAL_COMMAND_HELPER=0, how every call ran before) and the Python entry point through the helper
(`sbatch_python_helper`, `squeue_python_helper`: what decision 0019's opt-in gave). The helper is started
by a first, untimed call. The CPU figure of a call through the helper counts the calling process only, not
the helper's child that does the work; `helper_cpu_ms_per_call` is the helper's own CPU per call (accept,
the staleness check and the fork), from /proc.
Without a running Slurm it says so and gives corral's figures alone. As a floor for corral's figures it
also times this Python starting and doing nothing (`python -c pass`). It times `corral queue`, `show`,
`submit --hold` and `cancel`, as installed and through the Python entry point in their own process, and
`corral queue` through the full Typer app (how it ran before the lean commands); and it records the load
average before and after, since other work on the machine moves every figure.

corral's commands run with a bytecode cache (PYTHONPYCACHEPREFIX, a temporary directory, warmed by
one untimed call), as after a normal install: where PYTHONDONTWRITEBYTECODE is set, every call
would otherwise compile each module from source again.

With `--baseline PREFIX` (the prefix of another environment with corral and its native front-end installed,
e.g. one built from an earlier commit), that install's sbatch and squeue take their turns too
(`sbatch_baseline`, `squeue_baseline`, through its own helper), and its `corral queue`, `show`, `submit` and
`cancel` are timed after this install's (`corral_*_baseline`): a before and after in one run, under one load.

    python bench/slurm_latency.py [--sbatch N] [--squeue M] [--baseline PREFIX]   (defaults 500 and 100)"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import signal
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.harness import Cluster  # noqa: E402

from corral.slurm.front import HELPER_SWITCH, socket_path  # noqa: E402

SBATCH_ARGS = ("-o", "/dev/null", "--gres=gpu:1", "--wrap", "true")
SLURM_BIN = Path("/usr/bin")


class Calls(list):
    """Wall-clock milliseconds per call, with the CPU milliseconds (user + system) of each call's
    process in `cpu_ms`: the CPU figure hardly moves with other work on the machine, the wall one does."""

    cpu_ms: list[float]


def timed_calls(argv: list[str], count: int, env: dict[str, str]) -> Calls:
    """Every call must succeed."""
    times_ms, cpu_ms = Calls(), []
    for _ in range(count):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, check=False)
        times_ms.append((time.perf_counter() - start) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_ms.append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)
        if proc.returncode != 0:
            raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {proc.stderr.decode()}")
    times_ms.cpu_ms = cpu_ms
    return times_ms


def summary(times_ms: Calls) -> dict[str, float]:
    ordered = sorted(times_ms)

    def quantile(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {"median_ms": round(statistics.median(ordered), 2), "p90_ms": quantile(0.9), "p95_ms": quantile(0.95),
            "cpu_median_ms": round(statistics.median(times_ms.cpu_ms), 2)}


def wait_until_drained(squeue: list[str], env: dict[str, str], timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while subprocess.run([*squeue, "-h"], env=env, capture_output=True, text=True).stdout.strip():
        if time.monotonic() > deadline:
            raise SystemExit("the queue did not drain")
        time.sleep(0.5)


Way = tuple[Path, dict[str, str]]  # the commands' directory and the environment of a way to call them


def measure_alternating(ways: dict[str, Way], sbatch_calls: int, squeue_calls: int) -> dict:
    """measure()'s figures for each way of calling, its label a suffix of the names; the calls of the ways
    take turns, so that each sees the same load."""
    sbatch: dict[str, list[Calls]] = {label: [] for label in ways}
    squeue: dict[str, list[Calls]] = {label: [] for label in ways}
    for _ in range(sbatch_calls):
        for label, (bin_dir, env) in ways.items():
            sbatch[label].append(timed_calls([str(bin_dir / "sbatch"), *SBATCH_ARGS], 1, env))
    for bin_dir, env in ways.values():  # corral's ways share one queue; real Slurm has its own
        wait_until_drained([str(bin_dir / "squeue")], env)
    for _ in range(squeue_calls):
        for label, (bin_dir, env) in ways.items():
            squeue[label].append(timed_calls([str(bin_dir / "squeue")], 1, env))
    figures = {}
    for label in ways:
        figures[f"sbatch{label}"] = summary(_joined(sbatch[label]))
        figures[f"squeue{label}"] = summary(_joined(squeue[label]))
    return figures


def _joined(runs: list[Calls]) -> Calls:
    joined = Calls(t for run in runs for t in run)
    joined.cpu_ms = [c for run in runs for c in run.cpu_ms]
    return joined


def measure_corral(sbatch_calls: int, squeue_calls: int, slurm: bool = False, baseline: Path | None = None) -> dict:
    """corral's figures; with `slurm`, real Slurm's calls take turns with them too (`sbatch_slurm`,
    `squeue_slurm`), so that every ratio compares calls made under the same load."""
    with tempfile.TemporaryDirectory(prefix="corral-latency-") as tmp:
        cluster = Cluster(Path(tmp), nodes=4, gpus=8).start()
        try:
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("CORRAL_", "SLURM_", "SBATCH_")) and k != "PYTHONDONTWRITEBYTECODE"}
            runtime = Path(tmp) / "run"  # the command helper's private directory, this run's own
            runtime.mkdir(mode=0o700)
            env |= {"CORRAL_URL": cluster.url, "CORRAL_SECRET_FILE": str(cluster.secret_file),
                    "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache"), "XDG_RUNTIME_DIR": str(runtime)}
            scripts = Path(sysconfig.get_path("scripts"))
            python = python_entry_points(scripts)
            timed_calls([str(scripts / "sbatch"), "--version"], 1, env)
            # As installed (the native front-end and the helper), the Python entry point in its own process
            # (as before) and through the helper (0019's opt-in), call for call in turn.
            own = {**env, HELPER_SWITCH: "0"}
            helped = dict(env)  # the helper is on by default
            helper_socket = start_helper(scripts, helped)
            if baseline is not None:
                start_baseline_helper(baseline, helped)
            helper_cpu_before = helper_cpu_ms(helper_socket)
            try:
                ways = {"": (scripts, helped), "_python": (python, own), "_python_helper": (python, helped)}
                if baseline is not None:
                    ways["_baseline"] = (baseline / "bin", helped)
                if slurm:
                    ways["_slurm"] = (SLURM_BIN, dict(os.environ))
                figures = measure_alternating(ways, sbatch_calls, squeue_calls)
                helper_calls = 2 * (sbatch_calls + squeue_calls)
                figures["helper_cpu_ms_per_call"] = round(
                    (helper_cpu_ms(helper_socket) - helper_cpu_before) / helper_calls, 3)
                figures["python_startup"] = summary(timed_calls([sys.executable, "-c", "pass"], squeue_calls, env))
                figures |= measure_corral_cli(scripts, python, helped, own, squeue_calls, baseline)
            finally:
                stop_helper(helper_socket)
                if baseline is not None:
                    stop_baseline_helper(baseline)
            figures["native_front_end"] = (scripts / "sbatch").read_bytes()[:4] == b"\x7fELF"
            return figures
        finally:
            cluster.stop()


def python_entry_points(scripts: Path) -> Path:
    """Where the Python entry points are: behind the native front-end (corral.slurm.build_front), or the
    console scripts themselves where it is not installed."""
    from corral.slurm.build_front import entry_points_dir

    behind = entry_points_dir()
    return behind if (behind / "sbatch").exists() else scripts


def helper_cpu_ms(path: str) -> float:
    """CPU (user + system) the helper serving `path` has used itself, without its children's."""
    total = 0.0
    for pid in helper_pids(path):
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")
    return total


def start_helper(scripts: Path, env: dict[str, str], timeout_s: float = 30.0) -> str:
    """Start the user's command helper with a first call and wait until it serves; its socket."""
    path = socket_path(env)
    if path is None:
        raise SystemExit("no private directory for the command helper")
    timed_calls([str(scripts / "squeue"), "--version"], 1, env)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        probe = socket.socket(socket.AF_UNIX)
        try:
            probe.connect(path)
            return path
        except OSError:
            time.sleep(0.05)
        finally:
            probe.close()
    raise SystemExit(f"the command helper did not start on {path}")


def start_baseline_helper(prefix: Path, env: dict[str, str], timeout_s: float = 30.0) -> None:
    """Start the baseline install's helper (its socket's name is its own install's) with first calls."""
    deadline = time.monotonic() + timeout_s
    timed_calls([str(prefix / "bin" / "squeue"), "--version"], 1, env)
    while not baseline_helper_pids(prefix):
        if time.monotonic() > deadline:
            raise SystemExit(f"the baseline's command helper ({prefix}) did not start")
        time.sleep(0.1)
    time.sleep(1.0)  # listening, its child forked ahead
    timed_calls([str(prefix / "bin" / "squeue"), "--version"], 3, env)


def baseline_helper_pids(prefix: Path) -> list[int]:
    return [pid for pid in _pids_with(b"corral.slurm.helper") if str(prefix).encode() in _cmdline(pid)[0]]


def stop_baseline_helper(prefix: Path) -> None:
    for pid in baseline_helper_pids(prefix):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def _pids_with(arg: bytes) -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and arg in _cmdline(entry.name)]


def _cmdline(pid: int | str) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return [b""]


def helper_pids(path: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"corral.slurm.helper" in args and path.encode() in args:
                found.append(int(entry.name))
    return found


def stop_helper(path: str) -> None:
    """End the helper serving `path` (it would end by itself after its idle time)."""
    for pid in helper_pids(path):
        with contextlib.suppress(ProcessLookupError):  # its waiting child goes with the helper
            os.kill(pid, signal.SIGTERM)


# `corral queue` through the full Typer app, as every `corral` command ran before the lean commands
# (docs/decisions/0019-fast-commands.md): the "before" figure, measured in the same run.
TYPER_APP = "import sys; from corral.cli.app import app; sys.argv[0] = 'corral'; app()"
TYPER_CALLS_MAX = 30  # each takes hundreds of milliseconds


def measure_corral_cli(scripts: Path, python: Path, helped: dict[str, str], own: dict[str, str],
                       calls: int, baseline: Path | None = None) -> dict:
    """`corral queue`, `show`, `submit --hold` and `cancel`, as installed (through the helper) and through
    the Python entry point in its own process, call for call in turn; `corral queue` through the Typer app."""
    typer_calls = min(calls, TYPER_CALLS_MAX)
    submit = ["submit", "-o", "/dev/null", "--hold", "--parsable", "--wrap", "true"]
    figures = {}
    ways = {"": (scripts, helped), "_python": (python, own)}
    if baseline is not None:
        ways["_baseline"] = (baseline / "bin", helped)
    for label, (bin_dir, env) in ways.items():
        corral = str(bin_dir / "corral")
        timed_calls([corral, "queue"], 1, env)  # warm-up: bytecode of the lean path
        figures[f"corral_queue{label}"] = summary(timed_calls([corral, "queue"], calls, env))
        figures[f"corral_show{label}"] = summary(timed_calls([corral, "show", "1"], calls, env))  # an sbatch job
        submitted, cancelled = Calls(), Calls()
        submitted.cpu_ms, cancelled.cpu_ms = [], []
        for _ in range(typer_calls):
            job = subprocess.run([corral, *submit], env=env, capture_output=True, text=True, check=True)
            start = time.perf_counter()
            subprocess.run([corral, "cancel", job.stdout.strip()], env=env, capture_output=True, check=True)
            cancelled.append((time.perf_counter() - start) * 1000)
        figures[f"corral_submit{label}"] = summary(timed_calls([corral, *submit], typer_calls, env))
        held = subprocess.run([str(scripts / "squeue"), "-h", "-t", "PD", "-o", "%i"], env=env,
                              capture_output=True, text=True, check=True).stdout.split()
        if held:  # the next way lists the same queue
            subprocess.run([str(scripts / "scancel"), *held], env=env, capture_output=True, check=True)
        figures[f"corral_cancel{label}"] = summary(_wall_only(cancelled))
    figures["corral_queue_typer"] = summary(timed_calls([sys.executable, "-c", TYPER_APP, "queue"], typer_calls, own))
    return figures


def _wall_only(times_ms: Calls) -> Calls:
    times_ms.cpu_ms = [float("nan")] * len(times_ms)
    return times_ms


def slurm_available() -> bool:
    try:
        return subprocess.run([str(SLURM_BIN / "sinfo"), "-h"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


NO_SLURM = ("real Slurm is not running (no answer from /usr/bin/sinfo): corral's latency is measured alone; "
            "start ../shared/anchors/slurm/setup.sh for the side-by-side figures")


def run(sbatch_calls: int = 500, squeue_calls: int = 100, baseline: Path | None = None) -> dict:
    """corral's figures, then real Slurm's when it answers, in one run; ratios corral / Slurm."""
    result: dict = {"bench": "slurm-latency", "sbatch_calls": sbatch_calls, "squeue_calls": squeue_calls,
                    "machine": f"{platform.node()} cpus={os.cpu_count()}", "python": platform.python_version(),
                    "loadavg_before": os.getloadavg()[0]}
    slurm = slurm_available()
    result["corral"] = measure_corral(sbatch_calls, squeue_calls, slurm, baseline)
    result["slurm"] = ({"sbatch": result["corral"].pop("sbatch_slurm"), "squeue": result["corral"].pop("squeue_slurm")}
                       if slurm else None)
    result["loadavg_after"] = os.getloadavg()[0]
    if result["slurm"]:
        result["ratio_corral_over_slurm"] = {
            f"{cmd}_{stat}": round(result["corral"][cmd][f"{stat}_ms"]
                                   / result["slurm"][cmd.split("_")[0]][f"{stat}_ms"], 2)
            for cmd in ("sbatch", "squeue", "sbatch_python", "squeue_python", "sbatch_python_helper",
                        "squeue_python_helper", *(("sbatch_baseline", "squeue_baseline") if baseline else ()))
            for stat in ("median", "p95", "cpu_median")}
    else:
        result["slurm_skipped"] = NO_SLURM
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sbatch", type=int, default=500, help="sbatch calls")
    parser.add_argument("--squeue", type=int, default=100, help="squeue calls")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="prefix of another corral install to time in turn (the before figures)")
    args = parser.parse_args()
    result = run(args.sbatch, args.squeue, args.baseline)
    if result["slurm"] is None:
        print(NO_SLURM, file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
