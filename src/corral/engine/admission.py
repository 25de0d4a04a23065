"""Admission: turn a submission in Slurm's terms into a normalized JobSpec, or say exactly why it can
never run. Pure: the cluster's partitions and nodes are inputs."""
from __future__ import annotations

import dataclasses
import signal
from collections.abc import Iterable
from dataclasses import dataclass

from corral import container_options, gpu_models
from corral.api.schemas import JobSubmit
from corral.core.fgd import model_matches
from corral.core.model import GPU_MILLI, Request
from corral.engine.arrays import ArrayError, parse_array
from corral.engine.config import EngineConfig, PartitionConfig
from corral.engine.dependencies import DependencyError, parse_dependency
from corral.engine.kinds import kind_from_flags
from corral.engine.node_choice import NodeChoiceError, check_choice, needed_features
from corral.engine.records import JobSpec, Node
from corral.engine.tenancy import Tenancy, TenancyError
from corral.ranges import compress_ranges


class AdmissionError(ValueError):
    """The submission can never run as stated; the message says why."""


class PartitionMembers:
    """The nodes of each partition and their largest GPU count, worked out once per partition rather than
    once per submission (a walk over every node). The engine makes a new one whenever a node registers."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self._nodes = tuple(nodes)
        self._of: dict[str, tuple[list[Node], int]] = {}
        self._names: frozenset[str] | None = None

    def of(self, partition: PartitionConfig) -> tuple[list[Node], int]:
        """The partition's nodes (not to be changed) and the most GPUs any of them has."""
        found = self._of.get(partition.name)
        if found is None:
            members = [n for n in self._nodes if partition.contains(n.name)]
            found = self._of[partition.name] = (members, max((len(n.gpus) for n in members), default=0))
        return found

    def names(self) -> frozenset[str]:
        """Every node the cluster knows."""
        if self._names is None:
            self._names = frozenset(n.name for n in self._nodes)
        return self._names


@dataclass(frozen=True, slots=True)
class Admitted:
    spec: JobSpec
    array_indices: list[int] | None  # None: not an array


def admit_full(sub: JobSubmit, config: EngineConfig, nodes: Iterable[Node] | PartitionMembers,
               tenancy: Tenancy) -> Admitted:
    """Validate and normalize everything about a submission, tenancy and array included."""
    spec = admit(sub, config, nodes)
    try:
        account, qos, queue = tenancy.resolve(sub.user, sub.account, sub.qos, sub.queue)
    except TenancyError as exc:
        raise AdmissionError(str(exc)) from None
    warn_signal, warn_before_s = parse_signal(sub.signal) if sub.signal else (0, 0)
    if sub.dependency:
        try:
            parse_dependency(sub.dependency)
        except DependencyError as exc:
            raise AdmissionError(str(exc)) from None
    indices, throttle = None, None
    if sub.array:
        try:
            indices, throttle = parse_array(sub.array)
        except ArrayError as exc:
            raise AdmissionError(str(exc)) from None
    spec = dataclasses.replace(
        spec, account=account, qos=qos, queue=queue, dependency=sub.dependency or "", warn_signal=warn_signal,
        warn_before_s=warn_before_s, warn_batch=bool(sub.signal and sub.signal.startswith("B:")),
        requeue=sub.requeue, expedited_requeue=sub.expedited_requeue, reservation=sub.reservation or "",
        array_throttle=throttle, array_indices=compress_ranges(indices) if indices else "")
    return Admitted(spec, indices)


def parse_signal(text: str) -> tuple[int, int]:
    """Slurm's --signal=[B:]SIG[@seconds] (default 60 s)."""
    body = text[2:] if text.startswith(("B:", "R:")) else text
    name, _, secs = body.partition("@")
    if secs and (not secs.isdecimal() or int(secs) > 65535):
        raise AdmissionError(f"invalid --signal time {secs!r}: it must be whole seconds from 0 to 65535")
    if name.isdecimal():
        number = int(name)
        if not 1 <= number < signal.NSIG:
            raise AdmissionError(f"invalid signal number {name!r} in --signal")
        return number, int(secs or 60)
    try:
        number = signal.Signals["SIG" + name.upper().removeprefix("SIG")].value
    except KeyError:
        raise AdmissionError(f"invalid signal name {name!r} in --signal") from None
    return number, int(secs or 60)


def admit(sub: JobSubmit, config: EngineConfig, nodes: Iterable[Node] | PartitionMembers) -> JobSpec:
    kind = kind_from_flags(sub.batch, sub.allocation)
    if not kind.launches_tasks:
        if sub.script is not None or sub.argv is not None or sub.batch or sub.array:
            raise AdmissionError("an allocation (salloc) runs no script or command of its own and is no array")
    elif (sub.script is None) == (sub.argv is None):
        raise AdmissionError("give exactly one of a script or a command")
    if sub.script is not None and not sub.script.startswith("#!"):
        raise AdmissionError("the script must start with a '#!' interpreter line")
    if sub.argv is not None and not sub.argv:
        raise AdmissionError("the command is empty")
    if sub.script_args and sub.script is None:
        raise AdmissionError("script arguments given without a script")
    if sub.expedited_requeue and (not sub.requeue or not kind.requeueable):
        raise AdmissionError("expedited requeue (--requeue=expedite) is for jobs that may be requeued: not with "
                             "--no-requeue, nor for an allocation (salloc), which is never requeued")
    sub = _with_share(sub, config)
    partition = _partition(sub, config)
    index = nodes if isinstance(nodes, PartitionMembers) else PartitionMembers(nodes)
    members, max_gpus = index.of(partition)
    if sub.gpu_model:
        models = sorted({gpu_models.describe(g.model) for n in members for g in n.gpus})
        members = [n for n in members if n.gpus and model_matches(n.gpus[0].model, sub.gpu_model)]
        if not members:
            raise AdmissionError(f"no node of partition {partition.name!r} has GPU model {sub.gpu_model!r} "
                                 f"(models: {', '.join(models) or 'none'})")
        max_gpus = max(len(n.gpus) for n in members)
    sub, members, max_gpus = _chosen(sub, members, max_gpus, index)
    request = _request(sub, partition, members, max_gpus)
    if kind.default_name:
        name = sub.name or kind.default_name
    elif sub.script is not None:
        name = sub.name or "script"
    else:
        assert sub.argv is not None  # JobSubmit holds a script or an argv
        name = sub.name or sub.argv[0].rsplit("/", 1)[-1]
    return JobSpec(
        name=name, user=sub.user, request=request, script=sub.script,
        argv=tuple(sub.argv if sub.argv is not None else sub.script_args), allocation=sub.allocation,
        begin_time=sub.begin_time, workdir=sub.workdir, env=dict(sub.env),
        output=sub.output or ("slurm-%A_%a.out" if sub.array else "slurm-%j.out"), error=sub.error,
        gpus_per_task=sub.gpus_per_task, batch=sub.batch, comment=sub.comment, wckey=sub.wckey,
        acctg_freq_s=sub.acctg_freq_s,
        open_mode=sub.open_mode or kind.default_open_mode,
        explicit=",".join(k for k in ("ntasks", "ntasks_per_node", "cpus_per_task", "gpus_per_node")
                          if getattr(sub, k) is not None),
        priority=sub.priority, uid=sub.uid, submit_host=sub.submit_host, gpu_share=sub.gpu_share or "",
        nodelist=sub.nodelist or "", exclude=sub.exclude or "", constraint=sub.constraint or "",
        exclusive=sub.exclusive, **{name: getattr(sub, name) for name in container_options.FIELDS},
    )


def _chosen(sub: JobSubmit, members: list[Node], max_gpus: int, index: PartitionMembers
            ) -> tuple[JobSubmit, list[Node], int]:
    """The submission with the node count its -w gives, the partition's nodes its -w/-x/--constraint allow,
    and the most GPUs one of them has (all as given when it chose nothing)."""
    needs = needed_features(sub.container_image)
    if not (sub.nodelist or sub.exclude or sub.constraint or needs):
        return sub, members, max_gpus
    try:
        count, allowed = check_choice(sub.nodelist or "", sub.exclude or "", sub.constraint or "", sub.nodes,
                                      members, index.names(), needs)
    except NodeChoiceError as exc:
        raise AdmissionError(str(exc)) from None
    if count != sub.nodes:
        sub = sub.model_copy(update={"nodes": count})
    members = [n for n in members if n.name in allowed]
    return sub, members, max(len(n.gpus) for n in members)


def _with_share(sub: JobSubmit, config: EngineConfig) -> JobSubmit:
    """A share in Slurm's terms (gpu_share `shard:N` or `mps:P`) as milli-GPUs of one GPU per node."""
    if sub.gpu_share is None:
        return sub
    if sub.gpu_milli is not None:
        raise AdmissionError("give a GPU share as gpu_share or as gpu_milli, not both")
    given = [name for name in ("gpus", "gpus_per_task") if getattr(sub, name) is not None]
    if given:
        raise AdmissionError(f"gres/gpu and gres/{sub.gpu_share.split(':')[0]} cannot be combined: "
                             f"{given[0]} asks for whole GPUs")
    kind, _, amount_text = sub.gpu_share.partition(":")
    amount = int(amount_text)
    if kind == "shard":
        shards = config.shards_per_gpu
        if not 1 <= amount <= shards:
            raise AdmissionError(f"shard:{amount}: a job takes 1 to {shards} shards of one GPU per node "
                                 f"(this cluster has {shards} shards per GPU)")
        milli = GPU_MILLI if amount == shards else amount * GPU_MILLI // shards
    else:
        if not 1 <= amount <= 100:
            raise AdmissionError(f"mps:{amount}: mps is a percentage of one GPU, 1 to 100")
        milli = amount * GPU_MILLI // 100
    return sub.model_copy(update={"gpu_milli": milli, "gpus_per_node": sub.gpus_per_node or 1})


def _partition(sub: JobSubmit, config: EngineConfig) -> PartitionConfig:
    if sub.partition is None:
        default = config.default_partition
        if default is None:
            raise AdmissionError("no partition given and the cluster has no default partition")
        return default
    found = config.partition(sub.partition)
    if found is None:
        known = ", ".join(p.name for p in config.partitions)
        raise AdmissionError(f"invalid partition name specified: {sub.partition!r} (partitions: {known})")
    return found


def _request(sub: JobSubmit, partition: PartitionConfig, members: list[Node], max_gpus: int) -> Request:
    nodes = _node_count(sub, max_gpus)
    tasks_per_node = _tasks_per_node(sub, nodes)
    gpus_per_node = _gpus_per_node(sub, nodes, tasks_per_node)
    cpus_per_task = sub.cpus_per_task or 1
    cpus_per_node = tasks_per_node * cpus_per_task
    mem = _mem_per_node(sub, gpus_per_node, cpus_per_node)
    limit = _time_limit(sub, partition)
    milli = sub.gpu_milli or 1000
    if milli < 1000 and gpus_per_node != 1:
        raise AdmissionError(f"gpu_milli {milli} is a share of one GPU: it needs exactly 1 GPU per node, "
                             f"not {gpus_per_node}")
    req = Request(num_nodes=nodes, tasks_per_node=tasks_per_node, gpus_per_node=gpus_per_node,
                  cpus_per_task=cpus_per_task, mem_per_node_mib=mem, time_limit_s=limit,
                  partition=partition.name, gpu_model=sub.gpu_model or "", gpu_milli=milli)
    _check_fits(req, partition, members)
    return req


def _time_limit(sub: JobSubmit, partition: PartitionConfig) -> int:
    cap = partition.max_time_s
    if sub.time_limit_s is None:
        return partition.default_time_s if cap is None else min(partition.default_time_s, cap)
    if cap is not None and sub.time_limit_s > cap:
        raise AdmissionError(
            f"requested time limit {sub.time_limit_s}s exceeds the maximum {cap}s of partition {partition.name!r}")
    return sub.time_limit_s


def _node_count(sub: JobSubmit, max_gpus: int) -> int:
    if sub.nodes is not None:
        return sub.nodes
    if sub.ntasks is not None and sub.ntasks_per_node is not None:
        if sub.ntasks % sub.ntasks_per_node:
            raise AdmissionError(f"--ntasks={sub.ntasks} is not a multiple of --ntasks-per-node={sub.ntasks_per_node}")
        return sub.ntasks // sub.ntasks_per_node
    if sub.gpus and sub.gpus_per_node is None and max_gpus and sub.gpus > max_gpus:
        # Fewest nodes that split the GPUs evenly, each within the largest node's GPU count.
        for count in range(-(-sub.gpus // max_gpus), sub.gpus + 1):
            if sub.gpus % count == 0:
                return count
    return 1


def _tasks_per_node(sub: JobSubmit, nodes: int) -> int:
    if sub.ntasks_per_node is not None:
        if sub.ntasks is not None and sub.ntasks != sub.ntasks_per_node * nodes:
            raise AdmissionError(
                f"--ntasks={sub.ntasks} does not match --nodes={nodes} x --ntasks-per-node={sub.ntasks_per_node}")
        return sub.ntasks_per_node
    if sub.ntasks is not None:
        if sub.ntasks < nodes:
            raise AdmissionError(f"--ntasks={sub.ntasks} is fewer than --nodes={nodes}")
        if sub.ntasks % nodes:
            raise AdmissionError(
                f"--ntasks={sub.ntasks} does not split evenly over {nodes} nodes; corral gives every node of "
                "a gang the same number of tasks: use --ntasks-per-node")
        return sub.ntasks // nodes
    return 1


def _gpus_per_node(sub: JobSubmit, nodes: int, tasks_per_node: int) -> int:
    candidates: dict[str, int] = {}
    if sub.gpus_per_node is not None:
        candidates["--gpus-per-node"] = sub.gpus_per_node
    if sub.gpus_per_task is not None:
        candidates["--gpus-per-task"] = sub.gpus_per_task * tasks_per_node
    if sub.gpus is not None:
        if sub.gpus % nodes:
            raise AdmissionError(f"--gpus={sub.gpus} does not split evenly over {nodes} nodes")
        candidates["--gpus"] = sub.gpus // nodes
    if len(set(candidates.values())) > 1:
        stated = ", ".join(f"{k} gives {v} per node" for k, v in candidates.items())
        raise AdmissionError(f"conflicting GPU requests: {stated}")
    return next(iter(candidates.values()), 0)


def _mem_per_node(sub: JobSubmit, gpus_per_node: int, cpus_per_node: int) -> int:
    given = [k for k in ("mem_mib", "mem_per_gpu_mib", "mem_per_cpu_mib") if getattr(sub, k) is not None]
    if len(given) > 1:
        raise AdmissionError("--mem, --mem-per-gpu and --mem-per-cpu are mutually exclusive")
    if sub.mem_mib is not None:
        return sub.mem_mib
    if sub.mem_per_gpu_mib is not None:
        if gpus_per_node == 0:
            raise AdmissionError("--mem-per-gpu needs GPUs")
        return sub.mem_per_gpu_mib * gpus_per_node
    if sub.mem_per_cpu_mib is not None:
        return sub.mem_per_cpu_mib * cpus_per_node
    return 0


def _fits(node: Node, req: Request) -> bool:
    return (len(node.gpus) >= req.gpus_per_node and node.cpus >= req.cpus_per_node
            and node.mem_mib >= req.mem_per_node_mib)


def _check_fits(req: Request, partition: PartitionConfig, members: list[Node]) -> None:
    found = 0
    for node in members:  # stops at the first num_nodes nodes that fit: most submissions fit the first
        if _fits(node, req):
            found += 1
            if found >= req.num_nodes:
                return
    fitting = [n for n in members if _fits(n, req)]
    if not members:
        raise AdmissionError(f"partition {partition.name!r} has no nodes")
    biggest = max(members, key=lambda n: (len(n.gpus), n.cpus, n.mem_mib))
    raise AdmissionError(
        f"requested node configuration is not available: {req.num_nodes} node(s) with "
        f"{req.gpus_per_node} GPUs, {req.cpus_per_node} CPUs and {req.mem_per_node_mib} MiB each; partition "
        f"{partition.name!r} has {len(fitting)} such node(s) of {len(members)} (largest: {len(biggest.gpus)} GPUs, "
        f"{biggest.cpus} CPUs, {biggest.mem_mib} MiB)")
