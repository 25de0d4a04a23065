"""Kinds of work: one behaviour table. A job's kind (`JobSpec.kind`) is one row of it, and the engine,
admission, views and the controller's launch messages read the row instead of branching on the spec's
flags: a new kind of work is a new row.

The kind is derived from what the spec already stores (`allocation`, `batch`), so rows written by any
earlier corral read back as the same kind; nothing new is stored for it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeVar

Slice = TypeVar("Slice")
Launches = Literal["first-node", "every-node", "nothing"]


@dataclass(frozen=True, slots=True)
class JobKind:
    name: str
    # Where the job's own processes run: its first node only (a batch script, whose steps use the rest),
    # every node of the gang (a command), or nowhere (an allocation: its holder lives outside corral).
    launches: Launches
    # Whether the engine may requeue a stopped run at all (the spec's --requeue/--no-requeue still applies).
    requeueable: bool
    # A holder outside corral ends it (POST /jobs/{id}/complete), not its tasks' exits.
    completed_by_holder: bool
    # Which signal scope reaches its own processes: a batch job's are its batch shell ("batch"), a
    # command's are its tasks, which scancel treats as steps ("steps").
    own_scope: Literal["batch", "steps"]
    # Where --signal's warning goes when the user did not say B: (Slurm: every step, or the batch shell's
    # steps for a batch job).
    warn_target: Literal["steps", "all"]
    # Its output files start empty unless --open-mode=append (Slurm does so for batch jobs only).
    default_open_mode: Literal["truncate", "append"]
    # sacct shows an `N.batch` step row for it.
    batch_step: bool
    # The job's name when the user gave none, if the kind fixes one ("": its script's or command's).
    default_name: str
    # Its runs come back by themselves (a service's replicas): a run that ends is restarted with its
    # service's backoff, a stopped one rescheduled; only a cancel ends it (after_run.py).
    restarts: bool = False

    @property
    def launches_tasks(self) -> bool:
        return self.launches != "nothing"

    def launched(self, slices: tuple[Slice, ...], /) -> tuple[Slice, ...]:
        """The slices whose nodes run the job's own processes (or stand for its holder)."""
        return slices if self.launches == "every-node" else slices[:1]

    def tasks_on_node(self, tasks_per_node: int) -> int:
        """How many of its own tasks one launched node runs: a batch script is one task."""
        return 1 if self.batch_step else tasks_per_node


BATCH = JobKind("batch", launches="first-node", requeueable=True, completed_by_holder=False, own_scope="batch",
                warn_target="steps", default_open_mode="truncate", batch_step=True, default_name="")
COMMAND = JobKind("command", launches="every-node", requeueable=True, completed_by_holder=False,
                  own_scope="steps", warn_target="all", default_open_mode="append", batch_step=False,
                  default_name="")
# salloc, or srun outside a job: its holder (wherever it runs) starts steps in it and ends it. Requeued, it
# would wait for a holder that never comes back.
ALLOCATION = JobKind("allocation", launches="nothing", requeueable=False, completed_by_holder=True,
                     own_scope="steps", warn_target="all", default_open_mode="append", batch_step=False,
                     default_name="interactive")

# A replica of a service (engine/services.py): a gang of its command on every node, run until cancelled.
SERVICE = JobKind("service", launches="every-node", requeueable=True, completed_by_holder=False, own_scope="steps",
                  warn_target="all", default_open_mode="append", batch_step=False, default_name="", restarts=True)

# A notebook or dev environment (corral notebook): the one replica of a session service, routed to by the
# gateway like a service's but run once: whatever ends it (its time limit, an idle stop, a cancel, a
# preemption) ends its service too (service_events.py). Never requeued: a notebook started again has lost
# its kernels' state, and the user would not know where it went.
SESSION = JobKind("session", launches="every-node", requeueable=False, completed_by_holder=False, own_scope="steps",
                  warn_target="all", default_open_mode="append", batch_step=False, default_name="")

KINDS: dict[str, JobKind] = {kind.name: kind for kind in (BATCH, COMMAND, ALLOCATION, SERVICE, SESSION)}


def kind_from_flags(batch: bool, allocation: bool, service: str = "", session: bool = False) -> JobKind:
    """The kind a spec's stored fields say (JobSpec.kind)."""
    if session:
        return SESSION
    if service:
        return SERVICE
    if allocation:
        return ALLOCATION
    return BATCH if batch else COMMAND
