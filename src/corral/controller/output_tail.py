"""The end of a job's output file, for the dashboard's job page (GET /jobs/{id}/output).

As `corral logs` (cli/logs.py), the file is read where the controller runs: corral, like Slurm, expects job
working directories on a filesystem the nodes share, and the controller host is expected to mount it too;
where it does not, the reply says where the file is written instead. The controller reads as its own user
(often root), so it reads only a regular file owned by the job's user (or, on a node in development mode,
which runs every task as its agent's user, by that user): the path comes from the job's owner, who must
not be able to point it at a file they could not read themselves (a symlink to /etc/shadow is refused
by the owner check made on the opened file)."""
from __future__ import annotations

import codecs
import os
import pwd
import stat
from dataclasses import dataclass

from corral.engine.records import Job, Node
from corral.filename_pattern import expand_pattern

DEFAULT_TAIL_BYTES = 16384
MAX_TAIL_BYTES = 1 << 20


class OutputUnavailable(Exception):
    """Why the output cannot be shown; `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class OutputTail:
    path: str
    node: str
    size: int  # the file's size in bytes
    text: str  # its last bytes, decoded as UTF-8 (undecodable bytes replaced)
    truncated: bool  # True when the file is longer than what `text` holds
    start: int  # the byte offset in the file where `text` begins
    end: int  # the byte offset after `text`: where a reader following the file asks from next


def output_path(job: Job, error: bool = False) -> str:
    """The file the job's first task on its first node writes (as corral logs names it)."""
    pattern = job.spec.error if error and job.spec.error else job.spec.output
    name = expand_pattern(pattern, job_id=job.id, job_name=job.spec.name, user=job.spec.user,
                          node_name=job.slices[0].node, node_index=0, task_rank=0,
                          array_job_id=job.spec.array_job_id, array_task_id=job.spec.array_task_id)
    return os.path.join(job.spec.workdir, name)


def read_tail(job: Job, node: Node | None, tail_bytes: int, error: bool = False,
              from_byte: int | None = None) -> OutputTail:
    """Blocking (a shared filesystem may be slow): call it in a worker thread. `from_byte`: what a reader
    following the file has not seen yet (the `end` of its last read), at most `tail_bytes` of it (the
    newest); past the file's end (the file was rewritten), its tail as without it. A multi-byte character
    cut at the end is left for the next read, so that a follower never shows it broken."""
    if not job.slices:
        raise OutputUnavailable(409, f"job {job.id} has not started: it has no output yet")
    where = job.slices[0].node
    path = output_path(job, error)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise OutputUnavailable(404, f"{path} does not exist on the controller's host: job {job.id}'s output is "
                                     f"written on {where}; the dashboard reads it from a filesystem shared with "
                                     "the nodes") from None
    except OSError as exc:
        raise OutputUnavailable(404, f"cannot read {path} ({exc.strerror}) on the controller's host: job "
                                     f"{job.id}'s output is on {where}") from None
    with os.fdopen(fd, "rb") as stream:
        info = os.fstat(stream.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OutputUnavailable(403, f"{path} is not a regular file: it is not shown")
        if info.st_uid not in _owners(job, node):
            raise OutputUnavailable(403, f"{path} is not owned by {job.spec.user}, the job's user: it is not shown")
        start = max(0, info.st_size - tail_bytes)
        if from_byte is not None and from_byte <= info.st_size:
            start = max(start, from_byte)
        stream.seek(start)
        data = stream.read(info.st_size - start)  # not what was written since fstat: `end` is exact
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data, final=False)
    held_back = len(decoder.getstate()[0])
    return OutputTail(path=path, node=where, size=info.st_size, text=text, truncated=start > 0, start=start,
                      end=start + len(data) - held_back)


def _owners(job: Job, node: Node | None) -> set[int]:
    owners = {job.spec.uid}
    if node is not None and not node.run_as_user and node.agent_user:
        try:
            owners.add(pwd.getpwnam(node.agent_user).pw_uid)
        except KeyError:
            pass  # not a user of this host: no file can be its
    return owners
