"""srun's and salloc's command lines (22.05) -> a step layout, and the job fields of a new allocation.

Options stop at the command (srun's getopt runs in "+" mode: `srun python x.py --lr 1` passes `--lr 1`
to python). Inside an allocation srun reads the allocation's shape from the environment as Slurm's srun
does: SLURM_NTASKS, SLURM_NNODES/SLURM_JOB_NUM_NODES, SLURM_NTASKS_PER_NODE, SLURM_CPUS_PER_TASK and
SLURM_GPUS_PER_TASK set its defaults (`srun cmd` in `sbatch -N2 --ntasks-per-node=4` starts 8 tasks).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from corral.jobref import JobIdError, ascii_number, parse_job_id
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.getopt import NO_ARG, OPTIONAL, REQUIRED, CommandLine, Opt
from corral.slurm.common.optable import CommandSpec, check_support, parse_command_line
from corral.slurm.common.record import Record
from corral.slurm.sbatch import table as sbatch
from corral.slurm.sbatch import values as v

# Options that shape the step (key -> short, argument).
STEP: Mapping[str, tuple[str | None, int]] = {
    "nodes": ("N", REQUIRED), "ntasks": ("n", REQUIRED), "ntasks-per-node": (None, REQUIRED),
    "cpus-per-task": ("c", REQUIRED), "gpus-per-task": (None, REQUIRED), "nodelist": ("w", REQUIRED),
    "exclude": ("x", REQUIRED), "label": ("l", NO_ARG), "output": ("o", REQUIRED), "error": ("e", REQUIRED),
    "input": ("i", REQUIRED), "export": (None, REQUIRED), "unbuffered": ("u", NO_ARG), "chdir": ("D", REQUIRED),
    "job-name": ("J", REQUIRED), "jobid": (None, REQUIRED), "kill-on-bad-exit": ("K", OPTIONAL),
    "mpi": (None, REQUIRED), "overlap": (None, NO_ARG), "quiet": ("Q", NO_ARG), "verbose": ("v", NO_ARG),
    "help": ("h", NO_ARG), "usage": (None, NO_ARG), "version": ("V", NO_ARG), "disable-status": ("X", NO_ARG),
    "quit-on-interrupt": (None, NO_ARG), "distribution": ("m", REQUIRED), "pty": (None, NO_ARG),
}
# Options that only shape a new allocation (srun outside a job, salloc): sbatch's fields.
JOB_KEYS = ("account", "comment", "constraint", "dependency", "exclusive",
            "gpus", "gpus-per-node", "gres", "mem", "mem-per-cpu",
            "mem-per-gpu", "partition", "priority", "qos", "reservation", "signal", "time", "wckey")
# pyxis's options: a step's container (inside a job), or the new allocation's, which its steps inherit.
CONTAINER_KEYS = tuple(k for k in sbatch.JOB if "container-" in k)
IGNORED: Mapping[str, tuple[str | None, int, str]] = {
    **{k: sbatch.IGNORED[k] for k in (
        "clusters", "contiguous", "cores-per-socket", "core-spec", "cpu-freq", "delay-boot",
        "extra-node-info", "gpu-bind", "gpu-freq", "gres-flags", "hint", "mail-type", "mail-user", "mcs-label",
        "mem-bind", "mincpus", "network", "nice", "no-kill", "ntasks-per-core", "ntasks-per-socket", "overcommit",
        "oversubscribe", "power", "profile", "propagate", "reboot", "sockets-per-node", "spread-job", "switches",
        "thread-spec", "threads-per-core", "time-min", "tmp", "use-min-nodes")},
    "acctg-freq": (None, REQUIRED, "a step is sampled at its job's interval (sbatch --acctg-freq)"),
    "cpu-bind": (None, REQUIRED, "corral does not bind tasks to CPUs"),
    "exact": (None, NO_ARG, "steps share their job's resources"),
    "resv-ports": (None, OPTIONAL, "corral reserves no ports"),
    "send-libs": (None, OPTIONAL, "corral copies no libraries"),
    "slurmd-debug": (None, REQUIRED, "corral has no slurmd"),
    "threads": ("T", REQUIRED, "corral's agents start tasks themselves"),
    "wait": ("W", REQUIRED, "corral waits for every task"),
}
UNSUPPORTED: Mapping[str, tuple[str | None, int]] = {
    "bb": (None, REQUIRED), "bbf": (None, REQUIRED), "bcast": (None, OPTIONAL), "bcast-exclude": (None, REQUIRED),
    "begin": ("b", REQUIRED), "cluster-constraint": (None, REQUIRED), "compress": (None, OPTIONAL),
    "container": (None, REQUIRED), "cpus-per-gpu": (None, REQUIRED),
    "deadline": (None, REQUIRED), "epilog": (None, REQUIRED), "het-group": (None, REQUIRED),
    "hold": ("H", NO_ARG), "immediate": ("I", OPTIONAL), "licenses": ("L", REQUIRED), "multi-prog": (None, NO_ARG),
    "no-allocate": ("Z", NO_ARG), "preserve-env": ("E", NO_ARG), "prolog": (None, REQUIRED),
    "relative": ("r", REQUIRED), "task-epilog": (None, REQUIRED), "task-prolog": (None, REQUIRED),
}


def _options() -> tuple[Opt, ...]:
    shape = dict(STEP) | {k: sbatch.JOB[k][:2] for k in JOB_KEYS + CONTAINER_KEYS}
    shape |= {k: (s, a) for k, (s, a, _) in IGNORED.items()} | dict(UNSUPPORTED)
    aliases = {"ntasks-per-node": ("tasks-per-node",), "clusters": ("cluster",)}
    return tuple(Opt(key, short, arg, aliases.get(key, ())) for key, (short, arg) in sorted(shape.items()))


SRUN = CommandSpec("srun", _options(), getopt_exit=255, permute=False,
                   ignored={k: why for k, (_, _, why) in IGNORED.items()}, unsupported=frozenset(UNSUPPORTED))


class StepOptions(Record):
    command: tuple[str, ...] = ()
    nodes: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gpus_per_task: int | None = None
    nodes_given: bool = False  # on srun's command line, not from the environment
    ntasks_given: bool = False
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    label: bool = False
    output: str | None = None
    error: str | None = None
    input: str = "all"
    export: str | None = None
    workdir: str | None = None
    name: str | None = None
    jobid: int | None = None
    kill_on_bad_exit: bool = False
    pty: bool = False  # task 0 runs on a pseudo-terminal that srun's own terminal drives (--pty)
    quiet: bool = False
    verbose: int = 0
    action: str | None = None  # "help", "usage" or "version"
    job: Mapping[str, object] = {}  # JobSubmit fields for a new allocation
    container: Mapping[str, object] = {}  # its --container-* options, as JobSubmit's and StepSubmit's fields
    warnings: tuple[str, ...] = ()


def fail(message: str, exit_code: int = 1) -> SlurmCommandError:
    return SlurmCommandError(f"srun: error: {message}\n", exit_code)


def parse_srun(argv: Sequence[str], env: Mapping[str, str], spec: CommandSpec = SRUN) -> StepOptions:
    line = parse_command_line(spec, argv)
    for action in ("help", "usage", "version"):
        if line.has(action):
            return StepOptions(action=action)
    warnings = check_support(spec, line)
    try:
        return _step_options(line, env, tuple(warnings), spec.prog)
    except SlurmCommandError as exc:  # sbatch's value checks speak as sbatch
        raise SlurmCommandError(exc.stderr.replace("sbatch: ", f"{spec.prog}: "), exc.exit_code) from None


def _step_options(line: CommandLine, env: Mapping[str, str], warnings: tuple[str, ...], prog: str) -> StepOptions:
    mpi = line.last("mpi")
    if mpi is not None and mpi not in ("none", "pmi2", "pmix", "list"):
        raise fail(f"Invalid MPI type '{mpi}', --mpi=list for acceptable types")
    if mpi in ("pmi2", "pmix"):
        raise fail(f"--mpi={mpi} is not supported by corral: it has no PMI server; use --mpi=none "
                   f"and let the program find its peers from SLURM_PROCID/SLURM_NTASKS")
    distribution = line.last("distribution")
    if distribution is not None and distribution.split(":")[0] not in ("block", "*"):
        raise fail(f"--distribution={distribution} is not supported by corral: tasks are placed in blocks")
    job = {}
    for key in JOB_KEYS:
        if line.has(key):  # not `last(key) is not None`: a bare --exclusive has no value, and counts
            _, _, name, convert = sbatch.JOB[key]
            job[name] = convert(line.last(key), key)
    options = StepOptions(
        command=tuple(line.positionals), nodes=_int(line.last("nodes"), "nodes", v.node_count),
        ntasks=_int(line.last("ntasks"), "ntasks"),
        ntasks_per_node=_int(line.last("ntasks-per-node"), "ntasks-per-node"),
        cpus_per_task=_int(line.last("cpus-per-task"), "cpus-per-task"),
        gpus_per_task=_int(line.last("gpus-per-task"), "gpus-per-task"),
        nodes_given=line.has("nodes"), ntasks_given=line.has("ntasks"),
        nodelist=_hosts(line.values("nodelist")), exclude=_hosts(line.values("exclude")), label=line.has("label"),
        output=line.last("output"), error=line.last("error"), input=_input(line.last("input")),
        export=line.last("export", env.get("SLURM_EXPORT_ENV")), workdir=line.last("chdir"),
        name=line.last("job-name"), jobid=_int(line.last("jobid"), "jobid", _job_id),
        kill_on_bad_exit=line.has("kill-on-bad-exit") and line.last("kill-on-bad-exit") != "0",
        pty=line.has("pty"), quiet=line.has("quiet"), verbose=line.count("verbose"), job=v.split_gpu_models(job),
        container=_container(line), warnings=warnings)
    return with_environment(options, env)


def _container(line: CommandLine) -> dict[str, object]:
    """The --container-* options given, the last of each (and of --x/--no-x) winning, as in sbatch."""
    fields: dict[str, object] = {}
    for key, value in line.options:
        if key in CONTAINER_KEYS:
            _, _, name, convert = sbatch.JOB[key]
            fields[name] = convert if isinstance(convert, bool) else convert(value, key)
    return fields


def with_environment(options: StepOptions, env: Mapping[str, str]) -> StepOptions:
    """Defaults from SLURM_* input variables, where the command line left a value open."""
    def env_int(*names: str) -> int | None:
        for name in names:
            number = ascii_number(env.get(name, ""))
            if number:
                return number
        return None

    changes: dict[str, object] = {}
    if options.ntasks is None and not options.nodes_given:
        changes["ntasks"] = env_int("SLURM_NTASKS", "SLURM_NPROCS")
    if options.nodes is None:
        changes["nodes"] = env_int("SLURM_NNODES", "SLURM_JOB_NUM_NODES")
    if options.ntasks_per_node is None:
        changes["ntasks_per_node"] = env_int("SLURM_NTASKS_PER_NODE")
    if options.cpus_per_task is None:
        changes["cpus_per_task"] = env_int("SLURM_CPUS_PER_TASK")
    if options.gpus_per_task is None:
        changes["gpus_per_task"] = env_int("SLURM_GPUS_PER_TASK")
    if options.jobid is None:
        changes["jobid"] = env_int("SLURM_JOB_ID", "SLURM_JOBID")
    return options.replace(**changes)


def resolve_layout(options: StepOptions, allocated_nodes: int | None) -> tuple[StepOptions, list[str]]:
    """srun's own checks and adjustments of node and task counts, with its warnings."""
    warnings: list[str] = []
    nodes, ntasks, per_node = options.nodes, options.ntasks, options.ntasks_per_node
    if options.nodelist and not options.nodes_given:
        nodes = len(options.nodelist)
    if allocated_nodes is not None and nodes is not None and nodes > allocated_nodes:
        raise fail(f"Only allocated {allocated_nodes} nodes asked for {nodes}")
    shrunk = ntasks is not None and nodes is not None and ntasks < nodes
    if shrunk:
        warnings.append(f"srun: Warning: can't run {ntasks} processes on {nodes} nodes, setting nnodes to {ntasks}\n")
        nodes = ntasks
    if per_node is not None and ntasks is not None and nodes is not None and ntasks != per_node * nodes:
        # As recorded from real srun: silent when -N and -n were both given or the node count shrank.
        if not shrunk and not (options.ntasks_given and options.nodes_given):
            warnings.append(f"srun: Warning: can't honor --ntasks-per-node set to {per_node} which doesn't match "
                            f"the requested tasks {ntasks} with the number of requested nodes {nodes}. "
                            f"Ignoring --ntasks-per-node.\n")
        per_node = None
    return options.replace(nodes=nodes, ntasks=ntasks, ntasks_per_node=per_node), warnings


def _job_id(value: str, option: str) -> int:
    """A job's own id, ASCII digits only: int() would read `١٥` as 15."""
    try:
        return parse_job_id(value)
    except JobIdError:
        raise fail(f'Invalid job id "{value}" for --{option}.', 1) from None


def _int(value: str | None, option: str, convert=v.count) -> int | None:
    return None if value is None else convert(value, option)


def _hosts(values: list[str | None]) -> tuple[str, ...]:
    from corral import hostlist  # only -w/-x need it (start-up time)

    names: list[str] = []
    for value in values:
        try:
            names.extend(hostlist.expand(value or ""))
        except hostlist.HostlistError as exc:
            raise fail(f"Invalid node name specified: {exc}") from None
    return tuple(dict.fromkeys(names))


def _input(value: str | None) -> str:
    if value is None or value == "all":
        return "all"
    if value == "none" or value == "/dev/null":
        return "none"
    if ascii_number(value) is not None:
        return value
    raise fail(f"--input={value} is not supported by corral: give all, none or a task number")
