"""squeue's fields: for each `-o` letter and `-O` name, the header and how to read the value from a
corral job record (squeue/print.c's _print_job_* functions).

A value of None stands for C's NULL string, which glibc's printf writes as "(null)"."""
from __future__ import annotations

from _collections_abc import Callable, Mapping

from corral.slurm.common import jobids, records, states, timefmt, tres
from corral.slurm.common.record import Record


class View(Record):
    """What a value depends on besides the job: the time of the query and SLURM_TIME_FORMAT."""

    now: float
    time_format: str | None = None


Getter = Callable[[Mapping, View], "str | None"]


class Field(Record):
    header: str
    value: Getter
    # Whether a right-justified value longer than the width is cut (squeue's cut_output): a bool,
    # or a function of the job for %R, whose reasons are cut and whose node lists are not.
    cut: object = True
    header_cut: bool = True
    # The record fields value() and cut read, so that squeue asks the controller for those only; None: not
    # declared (squeue then asks for every field it may read). tests/slurm/test_squeue_fields.py checks them.
    reads: tuple[str, ...] | None = None
    # The whole column at once, from the listing's columns (table.JobColumns), where that is cheaper than
    # value() per distinct combination of `reads` (values that seldom repeat: ids, names); it may answer
    # None (not this listing), and must then give what value() gives for every job.
    column: object = None


def _shows_reason(job: Mapping) -> bool:
    return states.job_state(job) in ("PENDING", "TIMEOUT", "FAILED")


def reason_or_nodes(job: Mapping, view: View) -> str:
    """%R: `(reason)` while pending and for failed or timed-out jobs, else the nodes."""
    if _shows_reason(job):
        return f"({records.reason(job)})"
    return job.get("nodelist") or ""


def time_left(job: Mapping, view: View) -> str:
    limit = job.get("time_limit_s")
    if limit is None:
        return timefmt.UNLIMITED
    return timefmt.squeue_duration(int(limit) - records.time_used_s(job, view.now))


def _start(job: Mapping) -> float | None:
    """When the job started, or for a pending job when the backfill plan expects it to."""
    if states.job_state(job) == "PENDING":
        return job.get("estimated_start")
    return job.get("start_time")


def end_time(job: Mapping, view: View) -> str:
    """%e: the end, or the expected one (start + limit); NONE for an unlimited job (no end)."""
    end, start = job.get("end_time"), _start(job)
    if end is None and start:
        limit = job.get("time_limit_s")
        if limit is None:
            return "NONE"
        end = start + limit
    return timefmt.make_time_str(end, view.now, view.time_format, unset="N/A")


def start_time(job: Mapping, view: View) -> str:
    return timefmt.make_time_str(_start(job), view.now, view.time_format, unset="N/A")


def _text(name: str) -> Getter:
    """A free-text field; empty is NULL in Slurm, so it prints (null)."""
    return lambda job, view: str(records.get(job, name) or "") or None


def _const(text: str | None) -> Getter:
    return lambda job, view: text


def _priority_float(job: Mapping, view: View) -> str:
    return f"{int(job.get('priority', 0)) / 0xFFFFFFFF:16.14f}"


_LETTER_FIELDS: Mapping[str, Field] = {
    "a": Field("ACCOUNT", _text("account")),
    "A": Field("JOBID", lambda j, v: jobids.raw_job_id(j)),
    "b": Field("TRES_PER_NODE", lambda j, v: tres.tres_per_node(j) or "N/A"),
    "B": Field("EXEC_HOST", lambda j, v: records.batch_host(j) or "n/a"),
    "c": Field("MIN_CPUS", lambda j, v: str(j.get("cpus_per_task", 1))),
    "C": Field("CPUS", lambda j, v: str(records.num_cpus(j))),
    "d": Field("MIN_TMP_DISK", _const("0")),
    "D": Field("NODES", lambda j, v: str(j.get("num_nodes", 1))),
    "e": Field("END_TIME", end_time),
    "E": Field("DEPENDENCY", _text("dependency")),
    "f": Field("FEATURES", _const(None)),
    "F": Field("ARRAY_JOB_ID", lambda j, v: jobids.array_job_id(j)),
    "g": Field("GROUP", lambda j, v: records.group_name(j)),
    "G": Field("GROUP", lambda j, v: str(records.gid(j))),
    "h": Field("OVER_SUBSCRIBE", _const("OK")),
    "H": Field("SOCKETS_PER_NODE", _const("*")),
    "i": Field("JOBID", lambda j, v: jobids.job_id(j)),
    "I": Field("CORES_PER_SOCKET", _const("*")),
    "j": Field("NAME", lambda j, v: str(j.get("name", ""))),
    "J": Field("THREADS_PER_CORE", _const("*")),
    "k": Field("COMMENT", _text("comment")),
    "K": Field("ARRAY_TASK_ID", lambda j, v: jobids.array_task_id(j)),
    "l": Field("TIME_LIMIT", lambda j, v: timefmt.squeue_time_limit(j.get("time_limit_s")), cut=False),
    "L": Field("TIME_LEFT", time_left, cut=False),
    "m": Field("MIN_MEMORY", lambda j, v: tres.mem_text(int(j.get("mem_per_node_mib", 0)), exact=True)),
    "M": Field("TIME", lambda j, v: timefmt.squeue_duration(records.time_used_s(j, v.now)), cut=False),
    "n": Field("REQ_NODES", _const(""), cut=False),
    "N": Field("NODELIST", lambda j, v: j.get("nodelist") or "", cut=False, header_cut=False),
    "o": Field("COMMAND", _text("command")),
    "O": Field("CONTIGUOUS", _const("0")),
    "p": Field("PRIORITY", _priority_float),
    "P": Field("PARTITION", lambda j, v: str(j.get("partition", ""))),
    "q": Field("QOS", _text("qos")),
    "Q": Field("PRIORITY", lambda j, v: str(j.get("priority", 0))),
    "r": Field("REASON", lambda j, v: records.reason(j)),
    "R": Field("NODELIST(REASON)", reason_or_nodes, cut=_shows_reason, header_cut=False),
    "S": Field("START_TIME", start_time),
    "t": Field("ST", lambda j, v: states.job_state_compact(j)),
    "T": Field("STATE", lambda j, v: states.job_state(j)),
    "u": Field("USER", lambda j, v: str(j.get("user", ""))),
    "U": Field("UID", lambda j, v: str(records.get(j, "uid"))),
    "v": Field("RESERVATION", _text("reservation")),
    "V": Field("SUBMIT_TIME", lambda j, v: timefmt.make_time_str(j.get("submit_time"), v.now, v.time_format,
                                                                  unset="N/A")),
    "w": Field("WCKEY", _text("wckey")),
    "W": Field("LICENSES", _const(None)),
    "x": Field("EXC_NODES", _const(""), cut=False),
    "X": Field("CORE_SPEC", _const("N/A")),
    "y": Field("NICE", _const("0")),
    "Y": Field("SCHEDNODES", _const(None), cut=False, header_cut=False),
    "z": Field("S:C:T", _const("*:*:*")),
    "Z": Field("WORK_DIR", lambda j, v: str(j.get("workdir", ""))),
}

# What each letter's field reads (Field.reads). The job's state decides a reason, a start and the time used.
_ARRAY_ID = ("id", "array_job_id", "array_task_id", "array_task_spec")
_REASON = ("state", "reason", "held", "exit_signal")
_TIME_USED = ("state", "start_time", "end_time")
_START = ("state", "estimated_start", "start_time")
_LETTER_READS: Mapping[str, tuple[str, ...]] = {
    "a": ("account",), "A": ("id",), "D": ("num_nodes",), "e": (*_START, "end_time", "time_limit_s"),
    "F": _ARRAY_ID, "i": _ARRAY_ID, "j": ("name",), "K": _ARRAY_ID, "l": ("time_limit_s",),
    "L": ("time_limit_s", *_TIME_USED), "M": _TIME_USED, "N": ("nodelist",), "p": ("priority",),
    "P": ("partition",), "q": ("qos",), "Q": ("priority",), "r": _REASON, "R": (*_REASON, "nodelist"),
    "S": _START, "t": ("state",), "T": ("state",), "u": ("user",), "V": ("submit_time",),
    **{letter: () for letter in "dfhHIJnOWxXyYz"},
}


def _own_ids(jobs) -> list[str] | None:
    """%i of jobs outside arrays, %A of any: the record's own id."""
    return list(map(str, jobs.column("id")))


def _job_ids(jobs) -> list[str] | None:
    """%i: each job's own id when none belongs to an array (jobids.job_id's last case)."""
    array_ids = jobs.column("array_job_id")
    return _own_ids(jobs) if array_ids.count(None) == len(array_ids) else None


def _texts_of(name: str):
    """str() of a field that every record carries (a listing's columns hold every field asked for)."""
    return lambda jobs: list(map(str, jobs.column(name)))


_LETTER_COLUMNS = {"i": _job_ids, "A": _own_ids, "j": _texts_of("name")}
LETTERS: Mapping[str, Field] = {
    letter: field.replace(reads=_LETTER_READS[letter], column=_LETTER_COLUMNS.get(letter))
    if letter in _LETTER_READS else field
    for letter, field in _LETTER_FIELDS.items()}

_LONG_TO_LETTER = {
    "account": "a", "arrayjobid": "F", "arraytaskid": "K", "batchhost": "B", "command": "o",
    "comment": "k", "dependency": "E", "endtime": "e", "groupid": "G", "groupname": "g",
    "jobarrayid": "i", "jobid": "A", "licenses": "W", "mincpus": "c", "minmemory": "m",
    "mintmpdisk": "d", "name": "j", "nice": "y", "nodelist": "N", "numcpus": "C", "numnodes": "D",
    "oversubscribe": "h", "shared": "h", "partition": "P", "priority": "p", "prioritylong": "Q",
    "qos": "q", "reason": "r", "reasonlist": "R", "reqnodes": "n", "reservation": "v",
    "schednodes": "Y", "starttime": "S", "state": "T", "statecompact": "t", "submittime": "V",
    "timeleft": "L", "timelimit": "l", "timeused": "M", "tres-per-node": "b", "userid": "U",
    "username": "u", "wckey": "w", "workdir": "Z",
}
def _window_end(which: int) -> Getter:
    """corral's own: a pending job's start window (the earliest and latest start around its forecast, that
    hold 80 % of actual starts), N/A for a job without a forecast. Slurm has no such -O name (it refuses one
    it does not know), so no Slurm format, and no default column, changes."""
    def value(job: Mapping, view: View) -> str:
        window = job.get("estimated_start_window") if states.job_state(job) == "PENDING" else None
        return timefmt.make_time_str(window[which] if window else None, view.now, view.time_format, unset="N/A")
    return value


LONG_NAMES: Mapping[str, Field] = {name: LETTERS[letter] for name, letter in _LONG_TO_LETTER.items()} | {
    "numtasks": Field("TASKS", lambda j, v: str(j.get("num_tasks", 1))),
    "stdout": Field("STDOUT", lambda j, v: str(j.get("output") or "") or None),
    "stderr": Field("STDERR", lambda j, v: str(j.get("error") or j.get("output") or "") or None),
    "stdin": Field("STDIN", _text("stdin")),
    "tres-alloc": Field("TRES_ALLOC", lambda j, v: tres.scontrol_text(tres.allocated(j)) or None),
    "restartcnt": Field("RESTART_COUNT", lambda j, v: str(j.get("restart_count", 0))),
    "requeue": Field("REQUEUE", lambda j, v: "1" if records.get(j, "requeue") else "0"),
    "startearliest": Field("EARLIEST_START", _window_end(0)),
    "startlatest": Field("LATEST_START", _window_end(1)),
}
