"""The agent's record, on disk, of the task process groups it started and that may still run.

A task is its own session and process group (tasks.py), so it outlives an agent that dies or is
stopped. A restarted agent cannot adopt such tasks yet; if they ran on unnoticed, the controller would
give their GPUs to the next job while they still use them. So each task's group is recorded here when it
starts (one small JSON file per group: pgid, job, step, GPUs, and the leader's start time) and forgotten
when it is reaped. `sweep()` kills whatever recorded task still runs: the agent calls it before it
registers, and `corral up` after its agents are gone.

A recorded pgid is trusted only with its leader's start time (in seconds since boot, so that a change of
the wall clock changes nothing, with the boot's id): Linux does not hand out a pid while a process,
process group or session still uses the number, so a live process with the pid but another start time
means the recorded session ended long ago. When the leader is gone but members of its session remain, a
member counts only if it started after the leader and carries the job's SLURM_JOB_ID.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

RECORDS_DIR = "tasks"
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
SWEEP_GRACE_S = 5.0  # between SIGTERM and SIGKILL
KILL_WAIT_S = 5.0  # after SIGKILL: how long to wait for the processes to go
POLL_S = 0.05
START_TIME_TOLERANCE_S = 0.01  # psutil's start times are in clock ticks (1/100 s)


@dataclass(frozen=True, slots=True)
class TaskRecord:
    pgid: int  # the task's main process, leader of its own session and process group
    started: float  # the leader's start, in seconds since boot
    boot_id: str  # which boot: after a reboot nothing recorded can still run
    job_id: int
    step_id: int | None  # None: the job's own tasks (its batch script or command)
    gpus: tuple[int, ...]  # the devices the task may use

    def describe(self) -> str:
        part = f"job {self.job_id}" if self.step_id is None else f"step {self.job_id}.{self.step_id}"
        gpus = f", GPUs {','.join(map(str, self.gpus))}" if self.gpus else ""
        return f"{part} (process group {self.pgid}{gpus})"


class TaskSpool:
    """The records of one agent's spool directory."""

    def __init__(self, spool_dir: Path) -> None:
        self.directory = Path(spool_dir) / RECORDS_DIR

    def add(self, pid: int, job_id: int, step_id: int | None, gpus: Iterable[int]) -> TaskRecord | None:
        """Record a task just started (its leader is our child, so at worst a zombie: never a stranger)."""
        try:
            started = since_boot(psutil.Process(pid))
        except psutil.Error:
            return None  # already reaped: nothing of it is ours to record any more
        record = TaskRecord(pid, started, boot_id(), job_id, step_id, tuple(gpus))
        self.write(record)
        return record

    def write(self, record: TaskRecord) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = self.directory / f".{record.pgid}.tmp"
        temporary.write_text(json.dumps(asdict(record)))
        os.replace(temporary, self._path(record.pgid))  # whole or absent, whenever the agent dies

    def remove(self, pgid: int) -> None:
        self._path(pgid).unlink(missing_ok=True)

    def records(self) -> list[TaskRecord]:
        found = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                fields = json.loads(path.read_text())
                found.append(TaskRecord(fields["pgid"], fields["started"], fields["boot_id"], fields["job_id"],
                                        fields["step_id"], tuple(fields["gpus"])))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable task record %s: %s", path, exc)
        return found

    def _path(self, pgid: int) -> Path:
        return self.directory / f"{pgid}.json"


def since_boot(proc: psutil.Process) -> float:
    """When the process started, in seconds since boot (psutil's create_time() follows the wall clock)."""
    return proc.create_time() - psutil.boot_time()


def boot_id() -> str:
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


def live_members(record: TaskRecord) -> list[psutil.Process]:
    """The live (not zombie) processes of the recorded task's session; [] once it is gone."""
    if record.boot_id != boot_id():
        return []
    try:
        leader_is_ours: bool | None = _same_start(since_boot(psutil.Process(record.pgid)), record.started)
    except psutil.NoSuchProcess:
        leader_is_ours = None
    except psutil.Error:
        leader_is_ours = False  # not ours to inspect, so not ours to kill
    if leader_is_ours is False:
        return []
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) != record.pgid or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if leader_is_ours is None and not _descends_from(proc, record):
                continue
        except (psutil.Error, OSError):
            continue
        members.append(proc)
    return members


def _same_start(a: float, b: float) -> bool:
    return abs(a - b) <= START_TIME_TOLERANCE_S


def _descends_from(proc: psutil.Process, record: TaskRecord) -> bool:
    return (since_boot(proc) >= record.started - START_TIME_TOLERANCE_S
            and proc.environ().get("SLURM_JOB_ID") == str(record.job_id))


def sweep(spool: TaskSpool, grace_s: float = SWEEP_GRACE_S) -> tuple[list[TaskRecord], list[TaskRecord]]:
    """Kill every recorded task that still runs (SIGTERM, `grace_s`, SIGKILL) and wait until it is gone.

    Returns (killed, survivors): the records that had live processes, and those whose processes outlived
    SIGKILL (stuck in the kernel, or not ours to kill); only survivors stay recorded."""
    records = spool.records()
    targets = {record: live_members(record) for record in records}
    procs = [proc for members in targets.values() for proc in members]
    _signal(procs, signal.SIGTERM)
    alive = _wait_gone(procs, grace_s)
    if alive:
        _signal(alive, signal.SIGKILL)
        alive = _wait_gone(alive, KILL_WAIT_S)
    survivors = [r for r, members in targets.items() if any(p in alive for p in members)]
    for record in records:
        if record not in survivors:
            spool.remove(record.pgid)
    return [r for r, members in targets.items() if members], survivors


def _signal(procs: list[psutil.Process], signum: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(signum)  # psutil refuses if the pid now belongs to another process
        except psutil.Error:
            pass


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait until none of `procs` runs (a zombie counts as gone); return those still running."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in procs if _running(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(POLL_S)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
