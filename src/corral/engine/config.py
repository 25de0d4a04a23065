"""Cluster configuration the engine needs, resolved once before any cycle runs."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from corral import hostlist
from corral.core.config import SchedulerConfig
from corral.core.model import Partition
from corral.engine.pacer import LIVE_MIN_INTERVAL_S

MAX_PRIORITY_JOB_FACTOR = 65533  # Slurm's upper bound


@functools.lru_cache(maxsize=256)
def _expanded(nodes: str) -> frozenset[str]:
    """A partition's members, expanded once: admission asks about every node for every submission."""
    return frozenset(hostlist.expand(nodes))


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    name: str
    # Hostlist expression of member nodes, or "ALL" for every node that registers.
    nodes: str = "ALL"
    default: bool = False
    max_time_s: int | None = None
    default_time_s: int = 3600
    up: bool = True
    # Slurm's PriorityJobFactor: jobs of this partition get weight_partition x this / the largest of any
    # partition as their partition priority.
    priority_job_factor: int = 1

    def __post_init__(self) -> None:
        factor = self.priority_job_factor
        if type(factor) is not int or not 0 <= factor <= MAX_PRIORITY_JOB_FACTOR:
            raise ValueError(f"partition {self.name!r}: priority_job_factor must be an integer from 0 to "
                             f"{MAX_PRIORITY_JOB_FACTOR}, not {factor!r}")

    def contains(self, node: str) -> bool:
        return self.nodes == "ALL" or node in self._members

    @property
    def _members(self) -> frozenset[str]:
        return _expanded(self.nodes)

    def core(self) -> Partition:
        return Partition(self.name, self.max_time_s, self.default, self.up)


# salloc without a command runs the user's shell as a step on the allocation's first node, on a
# pseudo-terminal (srun --pty), instead of on the submit host: Slurm's LaunchParameters=use_interactive_step.
USE_INTERACTIVE_STEP = "use_interactive_step"
LAUNCH_PARAMETERS = (USE_INTERACTIVE_STEP,)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    cluster_name: str = "corral"
    partitions: tuple[PartitionConfig, ...] = (PartitionConfig("gpu", default=True),)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    # Between SIGTERM and SIGKILL when a job is cancelled or runs out of time (Slurm's KillWait).
    kill_grace_s: float = 10.0
    # A node not heard from for this long is down; its jobs are requeued (or end NODE_FAIL if they may not be).
    node_timeout_s: float = 30.0
    # A node without contact with the controller for 2/3 of node_timeout_s kills its jobs' tasks itself, so
    # that they are gone before the node is declared down and they run elsewhere (decision 0017).
    self_fencing: bool = True
    # How long the healthy nodes of a job requeued after a node failure with --requeue=expedite are held
    # for it at most (no other job starts there), should it not start again sooner.
    expedite_hold_s: float = 300.0
    # After the grace period, how long to wait for the agent's report before sending SIGKILL again.
    kill_report_timeout_s: float = 20.0
    # A ready service replica being stopped (not one whose liveness failed: no longer ready) leaves the
    # endpoints at once and gets SIGTERM this much later: the gateway's long poll hears of it within a poll
    # (0.1 s) and a round trip; 2 s leaves room for a loaded controller and gateway, and is short beside a
    # rolling update's readiness wait.
    service_drain_s: float = 2.0
    # A job never starts sooner than this after its submission, so that the submitter has its id
    # before the job runs (submitit creates the job's log directory only after sbatch returns).
    start_delay_s: float = 0.3
    # A job preempted again and again waits before it may start again: nothing after its first
    # preemption, then requeue_backoff_s, doubling each time up to requeue_backoff_max_s (Kueue's
    # requeuing backoff). Without it a requeued victim restarts on what its preemptor could not use
    # yet and is preempted again within seconds, without end.
    requeue_backoff_s: float = 10.0
    requeue_backoff_max_s: float = 600.0
    # --gres=shard:N asks for N of a GPU's shards (Slurm's gres.conf Count, corral's for every GPU).
    shards_per_gpu: int = 8
    # The controller cancels a running job whose GPUs the agents saw idle (under 5 %) this long (0: never).
    # A policy of the controller's on the agents' samples: the engine does not read it.
    gpu_idle_cancel_s: float = 0.0
    # A job whose GPUs the agents saw idle this long is flagged (corral show, the API's gpu_idle_flagged,
    # /metrics), nothing more (0: never). Also the controller's, read from the samples, not the engine's.
    gpu_idle_flag_s: float = 1800.0
    # Slurm's LaunchParameters that corral knows (LAUNCH_PARAMETERS): for the commands, which read them from
    # /health (salloc's use_interactive_step); the engine does not read them.
    launch_parameters: tuple[str, ...] = ()
    # The live scheduling loop's least interval between cycle starts (engine/pacer.py, Slurm's
    # sched_min_interval): the controller's loop reads it, the engine does not.
    min_cycle_interval_s: float = LIVE_MIN_INTERVAL_S

    def __post_init__(self) -> None:
        unknown = [p for p in self.launch_parameters if p not in LAUNCH_PARAMETERS]
        if unknown:
            raise ValueError(f"launch_parameters: unknown {', '.join(map(repr, unknown))}; corral knows "
                             f"{', '.join(LAUNCH_PARAMETERS)}")
        names = [p.name for p in self.partitions]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate partition names in {names}")
        if sum(p.default for p in self.partitions) > 1:
            raise ValueError("more than one default partition")
        if type(self.expedite_hold_s) not in (int, float) or not 0 <= self.expedite_hold_s < float("inf"):
            raise ValueError(f"expedite_hold_s must be a number of seconds, 0 or more, not {self.expedite_hold_s!r}")
        for name in ("gpu_idle_cancel_s", "gpu_idle_flag_s", "min_cycle_interval_s"):
            value = getattr(self, name)
            if type(value) not in (int, float) or not 0 <= value < float("inf"):
                raise ValueError(f"{name} must be a number of seconds, 0 or more, not {value!r}")
        if type(self.self_fencing) is not bool:
            raise ValueError(f"self_fencing must be true or false, not {self.self_fencing!r}")
        if type(self.shards_per_gpu) is not int or not 1 <= self.shards_per_gpu <= 1000:
            raise ValueError(f"shards_per_gpu must be an integer from 1 to 1000 (milli-GPUs), "
                             f"not {self.shards_per_gpu!r}")

    @property
    def default_partition(self) -> PartitionConfig | None:
        for p in self.partitions:
            if p.default:
                return p
        return self.partitions[0] if len(self.partitions) == 1 else None

    def partition(self, name: str) -> PartitionConfig | None:
        for p in self.partitions:
            if p.name == name:
                return p
        return None

    def partition_factors(self) -> dict[str, float]:
        """Each partition's priority_job_factor normalized by the largest (Slurm's norm_priority); all 0
        if every factor is 0."""
        top = max((p.priority_job_factor for p in self.partitions), default=0)
        return {p.name: p.priority_job_factor / top if top else 0.0 for p in self.partitions}

    def partitions_of(self, node: str) -> frozenset[str]:
        return frozenset(p.name for p in self.partitions if p.contains(node))


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """What differs between the worlds the engine runs in, named once and chosen where it is built
    (build.py): the live controller's agents and submitters, or the simulator's stand-ins for them."""
    name: str
    # Agents can stop reporting: a node not heard from for node_timeout_s is lost. Simulated ones never do.
    nodes_go_silent: bool
    # A job waits start_delay_s after its submission, so that the submitter has its id first. A simulated
    # submitter needs no wait: its jobs start as soon as the policy allows.
    start_delay: bool

    def node_timeout_s(self, config: EngineConfig) -> float | None:
        """How long a node may be silent before it is lost; None: never (also what node_timeout_s = inf in
        the configuration file asks for)."""
        timeout = config.node_timeout_s
        return timeout if self.nodes_go_silent and timeout < math.inf else None

    def start_delay_s(self, config: EngineConfig) -> float:
        return config.start_delay_s if self.start_delay else 0.0


LIVE = EngineProfile("live", nodes_go_silent=True, start_delay=True)
SIMULATED = EngineProfile("simulated", nodes_go_silent=False, start_delay=False)
