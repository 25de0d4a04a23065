"""The agent's record, on disk, of the task process groups it started and that may still run.

A task is its own session and process group (tasks.py), started by a leader of its own (leaders.py), so
both outlive an agent that dies or is stopped. Each task's group is recorded here when it starts (one
small JSON file per group: pgid, the task's start time, job, step, rank, GPUs, its leader's pid and start
time) and forgotten when it is reaped; each job's and step's launch message is kept beside them while
its tasks run. A restarted agent adopts from these what still runs (decision 0015); `sweep()` kills
whatever recorded task still runs: the agent calls it for the records it cannot adopt, and `corral up`
after its agents are gone.

A recorded pgid is trusted only with its leader's start time (in seconds since boot, so that a change of
the wall clock changes nothing, with the boot's id): Linux does not hand out a pid while a process,
process group or session still uses the number, so a live process with the pid but another start time
means the recorded session ended long ago. When the leader is gone but members of its session remain, a
member counts only if it started after the leader and carries the job's SLURM_JOB_ID.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

RECORDS_DIR = "tasks"
LAUNCHES_DIR = "launches"
CONTACT_FILE = "contact"
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
    rank: int = 0
    leader: int = 0  # the task's leader (task_leader.c), which records its exit; 0: none (an older agent's)
    leader_started: float = 0.0  # since boot, as `started`

    def describe(self) -> str:
        part = f"job {self.job_id}" if self.step_id is None else f"step {self.job_id}.{self.step_id}"
        gpus = f", GPUs {','.join(map(str, self.gpus))}" if self.gpus else ""
        return f"{part} (process group {self.pgid}{gpus})"


class TaskSpool:
    """The records of one agent's spool directory."""

    def __init__(self, spool_dir: Path) -> None:
        self.directory = Path(spool_dir) / RECORDS_DIR
        self.launches = Path(spool_dir) / LAUNCHES_DIR
        self.contact = Path(spool_dir) / CONTACT_FILE  # the agent's last contact, for self-fencing (contact.py)

    def add(self, pid: int, job_id: int, step_id: int | None, gpus: Iterable[int], *, rank: int = 0,
            leader_pid: int = 0, leader_started: float = 0.0) -> TaskRecord | None:
        """Record a task just started (its leader has not reaped it, so at worst a zombie: never a stranger).
        `leader_started`: the leader's start as the factory read it (0.0: read it here)."""
        started = process_state(pid)
        if started is None:
            return None  # already reaped: its leader alone has anything to say about it now
        if leader_pid and not leader_started:
            leader = process_state(leader_pid)
            if leader is None:
                return None  # gone, and its task with it
            leader_started = leader[0]
        record = TaskRecord(pid, started[0], boot_id(), job_id, step_id, tuple(gpus), rank, leader_pid,
                            leader_started)
        self.write(record)
        return record

    def write(self, record: TaskRecord) -> None:
        temporary = self.directory / f".{record.pgid}.tmp"
        text = json.dumps({"pgid": record.pgid, "started": record.started, "boot_id": record.boot_id,
                           "job_id": record.job_id, "step_id": record.step_id, "gpus": list(record.gpus),
                           "rank": record.rank, "leader": record.leader, "leader_started": record.leader_started})
        _write_whole(temporary, self._path(record.pgid), text)

    def remove(self, pgid: int) -> None:
        self._path(pgid).unlink(missing_ok=True)

    def records(self) -> list[TaskRecord]:
        found = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                fields = json.loads(path.read_text())
                found.append(TaskRecord(fields["pgid"], fields["started"], fields["boot_id"], fields["job_id"],
                                        fields["step_id"], tuple(fields["gpus"]), fields.get("rank", 0),
                                        fields.get("leader", 0), fields.get("leader_started", 0.0)))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable task record %s: %s", path, exc)
        return found

    def _path(self, pgid: int) -> Path:
        return self.directory / f"{pgid}.json"

    # -- launch messages: what a restarted agent needs to run on with adopted tasks

    def save_launch(self, job_id: int, step_id: int | None, launch_json: str) -> None:
        path = self._launch_path(job_id, step_id)
        _write_whole(path.with_suffix(".tmp"), path, launch_json)

    def forget_launch(self, job_id: int, step_id: int | None, saved: str | None = None) -> None:
        """Remove the saved launch (only if it still is `saved`: a requeued job may have saved its next one)."""
        path = self._launch_path(job_id, step_id)
        try:
            if saved is None or path.read_text() == saved:
                path.unlink()
        except FileNotFoundError:
            pass

    def saved_launches(self) -> dict[tuple[int, int | None], str]:
        """(job id, step id or None) -> the launch message saved for it."""
        found: dict[tuple[int, int | None], str] = {}
        for path in sorted(self.launches.glob("*.json")):
            job, _, step = path.stem.partition(".")
            try:
                found[(int(job), int(step) if step else None)] = path.read_text()
            except (OSError, ValueError) as exc:
                log.warning("ignoring unreadable launch record %s: %s", path, exc)
        return found

    def _launch_path(self, job_id: int, step_id: int | None) -> Path:
        return self.launches / (f"{job_id}.json" if step_id is None else f"{job_id}.{step_id}.json")


def _write_whole(temporary: Path, path: Path, text: str) -> None:
    """`text` into `path`, whole or not at all whenever the agent dies (written aside, then renamed over it);
    the directory is made (0700) the first time it is missing, not looked for on every write."""
    data = text.encode()
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.replace(temporary, path)


def process_state(pid: int) -> tuple[float, str] | None:
    """A process's start in seconds since boot and its state letter ("Z": a zombie), from one read of its
    /proc stat (psutil reads it and /proc/stat twice over for the same figure); None if there is no such
    process, or it is not ours to inspect."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rpartition(b")")[2].split()
        return int(fields[19]) / _CLOCK_TICKS, fields[0].decode()
    except (OSError, ValueError, IndexError):
        return None


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def since_boot(proc: psutil.Process) -> float:
    """When the process started, in seconds since boot (psutil's create_time() follows the wall clock)."""
    return proc.create_time() - psutil.boot_time()


@functools.cache
def boot_id() -> str:
    """This boot's id (read once: it cannot change while this process runs)."""
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


def sweep(spool: TaskSpool, grace_s: float = SWEEP_GRACE_S,
          records: list[TaskRecord] | None = None) -> tuple[list[TaskRecord], list[TaskRecord]]:
    """Kill every recorded task (or those of `records`) that still runs (SIGTERM, `grace_s`, SIGKILL) and
    wait until it is gone.

    Returns (killed, survivors): the records that had live processes, and those whose processes outlived
    SIGKILL (stuck in the kernel, or not ours to kill); only survivors stay recorded."""
    records = spool.records() if records is None else records
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
