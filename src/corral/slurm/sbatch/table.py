"""sbatch's options (common/slurm_opt.c, 22.05) and what corral does with each.

Long names are kept in alphabetical order, which is Slurm's table order: glibc lists ambiguous
prefixes (`--s`) in that order. Every option is in one of four groups:
- JOB: sets a field of the submission (JobSubmit's names; comment, wckey, open_mode, export,
  exclusive, input and begin are turned into JobSubmit's fields by sbatch/main.py);
- COMMAND: changes what sbatch itself does (--parsable, --wrap, --wait, ...);
- IGNORED: accepted with a warning (hints, tuning corral does not have, mail);
- UNSUPPORTED: an error naming the option (hard requirements corral cannot honour).
`corral submit` reads the same table (corral.jobscript.submission): it takes a subset of JOB, with
corral's own messages, plus CORRAL_JOB, corral's options that Slurm's sbatch does not have."""
from __future__ import annotations

from _collections_abc import Mapping

from corral.slurm.common.getopt import NO_ARG, OPTIONAL, REQUIRED, Opt
from corral.slurm.sbatch import values as v

# key -> (short, argument, field, converter); a converter of True/False stores that for a flag.
JOB: Mapping[str, tuple[str | None, int, str, object]] = {
    "account": ("A", REQUIRED, "account", v.text),
    "acctg-freq": (None, REQUIRED, "acctg_freq_s", v.acctg_freq),
    "array": ("a", REQUIRED, "array", v.array),
    "begin": ("b", REQUIRED, "begin", v.text),
    "chdir": ("D", REQUIRED, "workdir", v.text),
    "comment": (None, REQUIRED, "comment", v.text),
    "constraint": ("C", REQUIRED, "constraint", v.text),
    # pyxis's options (its SPANK plugin adds them to sbatch, srun and salloc); decision 0020.
    "container-env": (None, REQUIRED, "container_env", v.container),
    "container-image": (None, REQUIRED, "container_image", v.container),
    "container-mount-home": (None, NO_ARG, "container_mount_home", True),
    "container-mounts": (None, REQUIRED, "container_mounts", v.container),
    "container-name": (None, REQUIRED, "container_name", v.container),
    "container-remap-root": (None, NO_ARG, "container_remap_root", True),
    "container-workdir": (None, REQUIRED, "container_workdir", v.container),
    "cpus-per-task": ("c", REQUIRED, "cpus_per_task", v.count),
    "dependency": ("d", REQUIRED, "dependency", v.dependency),
    "error": ("e", REQUIRED, "error", v.text),
    "exclude": ("x", REQUIRED, "exclude", v.text),
    "exclusive": (None, OPTIONAL, "exclusive", v.exclusive),
    "export": (None, REQUIRED, "export", v.text),
    "gpus": ("G", REQUIRED, "gpus", v.gpus),
    "gpus-per-node": (None, REQUIRED, "gpus_per_node", v.gpus),
    "gpus-per-task": (None, REQUIRED, "gpus_per_task", v.gpus),
    "gres": (None, REQUIRED, "gpus_per_node", v.gres),
    "hold": ("H", NO_ARG, "hold", True),
    "input": ("i", REQUIRED, "input", v.text),
    "job-name": ("J", REQUIRED, "name", v.text),
    "mem": (None, REQUIRED, "mem_mib", v.memory),
    "mem-per-cpu": (None, REQUIRED, "mem_per_cpu_mib", v.memory),
    "mem-per-gpu": (None, REQUIRED, "mem_per_gpu_mib", v.memory),
    "no-container-mount-home": (None, NO_ARG, "container_mount_home", False),
    "no-container-remap-root": (None, NO_ARG, "container_remap_root", False),
    "no-requeue": (None, NO_ARG, "requeue", False),
    "nodelist": ("w", REQUIRED, "nodelist", v.text),
    "nodes": ("N", REQUIRED, "nodes", v.node_count),
    "ntasks": ("n", REQUIRED, "ntasks", v.count),
    "ntasks-per-node": (None, REQUIRED, "ntasks_per_node", v.count),
    "open-mode": (None, REQUIRED, "open_mode", v.open_mode),
    "output": ("o", REQUIRED, "output", v.text),
    "partition": ("p", REQUIRED, "partition", v.partition),
    "priority": (None, REQUIRED, "priority", v.priority),
    "qos": ("q", REQUIRED, "qos", v.text),
    "requeue": (None, OPTIONAL, "requeue", v.requeue),  # --requeue[=expedite] (Slurm 25.11)
    "reservation": (None, REQUIRED, "reservation", v.text),
    "signal": (None, REQUIRED, "signal", v.signal_spec),
    "time": ("t", REQUIRED, "time_limit_s", v.time_limit),
    "wckey": (None, REQUIRED, "wckey", v.text),
}
COMMAND: Mapping[str, tuple[str | None, int]] = {
    "help": ("h", NO_ARG), "ignore-pbs": (None, NO_ARG), "parsable": (None, NO_ARG), "quiet": ("Q", NO_ARG),
    "test-only": (None, NO_ARG), "usage": (None, NO_ARG), "verbose": ("v", NO_ARG), "version": ("V", NO_ARG),
    "wait": ("W", NO_ARG), "wrap": (None, REQUIRED),
}
IGNORED: Mapping[str, tuple[str | None, int, str]] = {
    "clusters": ("M", REQUIRED, "corral runs one cluster"),
    "contiguous": (None, NO_ARG, "corral does not place by network topology"),
    "cores-per-socket": (None, REQUIRED, "corral allocates CPUs, not sockets"),
    "core-spec": ("S", REQUIRED, "corral reserves no cores"),
    "cpu-freq": (None, REQUIRED, "corral does not set CPU frequencies"),
    "delay-boot": (None, REQUIRED, "corral does not reboot nodes"),
    "distribution": ("m", REQUIRED, "corral places tasks in node order"),
    "extra-node-info": ("B", REQUIRED, "corral allocates CPUs, not sockets"),
    "get-user-env": (None, OPTIONAL, "the job gets the submitting environment"),
    "gpu-bind": (None, REQUIRED, "corral binds GPUs by task order"),
    "gpu-freq": (None, REQUIRED, "corral does not set GPU frequencies"),
    "gres-flags": (None, REQUIRED, "corral keeps a task's GPUs in one domain when it can"),
    "hint": (None, REQUIRED, "corral allocates CPUs, not sockets"),
    "kill-on-invalid-dep": (None, REQUIRED, "corral decides this for dependencies itself"),
    "mail-type": (None, REQUIRED, "corral sends no mail"),
    "mail-user": (None, REQUIRED, "corral sends no mail"),
    "mcs-label": (None, REQUIRED, "corral has no MCS plugin"),
    "mem-bind": (None, REQUIRED, "corral does not bind memory"),
    "mincpus": (None, REQUIRED, "corral sizes nodes from tasks and CPUs per task"),
    "network": (None, REQUIRED, "corral has no network options"),
    "nice": (None, OPTIONAL, "use --priority"),
    "no-kill": ("k", OPTIONAL, "corral ends a job whose node is lost"),
    "ntasks-per-core": (None, REQUIRED, "corral allocates CPUs, not cores"),
    "ntasks-per-gpu": (None, REQUIRED, "give --ntasks and --gpus-per-task"),
    "ntasks-per-socket": (None, REQUIRED, "corral allocates CPUs, not sockets"),
    "overcommit": ("O", NO_ARG, "corral does not overcommit CPUs"),
    "oversubscribe": ("s", NO_ARG, "corral does not share CPUs between jobs"),
    "power": (None, REQUIRED, "corral has no power management"),
    "profile": (None, REQUIRED, "corral gathers no profiles"),
    "propagate": (None, OPTIONAL, "resource limits are the agent's"),
    "reboot": (None, NO_ARG, "corral does not reboot nodes"),
    "sockets-per-node": (None, REQUIRED, "corral allocates CPUs, not sockets"),
    "spread-job": (None, NO_ARG, "corral places gangs by its own policy"),
    "switches": (None, REQUIRED, "corral does not place by network topology"),
    "thread-spec": (None, REQUIRED, "corral reserves no threads"),
    "threads-per-core": (None, REQUIRED, "corral allocates CPUs, not threads"),
    "time-min": (None, REQUIRED, "corral runs jobs for their --time"),
    "tmp": (None, REQUIRED, "corral does not track temporary disk"),
    "use-min-nodes": (None, NO_ARG, "corral schedules the minimum node count"),
    "wait-all-nodes": (None, REQUIRED, "corral starts a job once all its nodes are up"),
}
UNSUPPORTED: Mapping[str, tuple[str | None, int]] = {
    "batch": (None, REQUIRED), "bb": (None, REQUIRED), "bbf": (None, REQUIRED),
    "cluster-constraint": (None, REQUIRED), "container": (None, REQUIRED),
    "container-entrypoint": (None, NO_ARG), "container-save": (None, REQUIRED),  # pyxis's, not corral's
    "cpus-per-gpu": (None, REQUIRED), "deadline": (None, REQUIRED), "export-file": (None, REQUIRED),
    "gid": (None, REQUIRED), "gpus-per-socket": (None, REQUIRED), "licenses": ("L", REQUIRED),
    "nodefile": ("F", REQUIRED), "uid": (None, REQUIRED),
}
# Fields that state one quantity in different ways: a source (command line, SBATCH_* variables,
# script) that gives one replaces the others of lower-precedence sources (`--gpus 2` on the command
# line drops `#SBATCH --gpus-per-node=4` instead of contradicting it).
GROUPS: Mapping[str, str] = {"mem_mib": "mem", "mem_per_cpu_mib": "mem", "mem_per_gpu_mib": "mem",
                             "gpus": "gpus", "gpus_per_node": "gpus"}
MEMORY_FIELDS = tuple(f for f, group in GROUPS.items() if group == "mem")  # at most one per source
# corral submit's own job options (not sbatch's: `sbatch --qu` stays --quiet).
CORRAL_JOB: Mapping[str, tuple[str | None, int, str]] = {
    "queue": (None, REQUIRED, "queue"),  # the quota queue
}
_ALIASES = {"ntasks-per-node": ("tasks-per-node",), "clusters": ("cluster",)}


def _all_options() -> tuple[Opt, ...]:
    shape: dict[str, tuple[str | None, int]] = {k: (s, a) for k, (s, a, *_) in JOB.items()}
    shape |= dict(COMMAND) | {k: (s, a) for k, (s, a, _) in IGNORED.items()} | dict(UNSUPPORTED)
    return tuple(Opt(key, short, arg, _ALIASES.get(key, ())) for key, (short, arg) in sorted(shape.items()))


OPTIONS = _all_options()
BY_KEY: Mapping[str, Opt] = {o.key: o for o in OPTIONS}
# SBATCH_* input variables (slurm_opt.c's sbatch env names) -> option key. Flags take any value.
ENV_VARS: Mapping[str, str] = {
    "SBATCH_ACCOUNT": "account", "SBATCH_ACCTG_FREQ": "acctg-freq", "SBATCH_ARRAY_INX": "array",
    "SBATCH_CLUSTERS": "clusters", "SBATCH_CONSTRAINT": "constraint", "SBATCH_CONTAINER": "container",
    "SBATCH_CORE_SPEC": "core-spec", "SBATCH_CPUS_PER_GPU": "cpus-per-gpu", "SBATCH_DELAY_BOOT": "delay-boot",
    "SBATCH_DISTRIBUTION": "distribution", "SBATCH_ERROR": "error", "SBATCH_EXCLUSIVE": "exclusive",
    "SBATCH_EXPORT": "export", "SBATCH_GET_USER_ENV": "get-user-env", "SBATCH_GPU_BIND": "gpu-bind",
    "SBATCH_GPU_FREQ": "gpu-freq", "SBATCH_GPUS": "gpus", "SBATCH_GPUS_PER_NODE": "gpus-per-node",
    "SBATCH_GPUS_PER_TASK": "gpus-per-task", "SBATCH_GRES": "gres", "SBATCH_GRES_FLAGS": "gres-flags",
    "SBATCH_HINT": "hint", "SBATCH_IGNORE_PBS": "ignore-pbs", "SBATCH_INPUT": "input",
    "SBATCH_JOB_NAME": "job-name", "SBATCH_MEM_BIND": "mem-bind", "SBATCH_MEM_PER_CPU": "mem-per-cpu",
    "SBATCH_MEM_PER_GPU": "mem-per-gpu", "SBATCH_MEM_PER_NODE": "mem", "SBATCH_NETWORK": "network",
    "SBATCH_NO_KILL": "no-kill", "SBATCH_NO_REQUEUE": "no-requeue", "SBATCH_OPEN_MODE": "open-mode",
    "SBATCH_OUTPUT": "output", "SBATCH_OVERCOMMIT": "overcommit", "SBATCH_PARTITION": "partition",
    "SBATCH_POWER": "power", "SBATCH_PROFILE": "profile", "SBATCH_QOS": "qos", "SBATCH_REQ_SWITCH": "switches",
    "SBATCH_REQUEUE": "requeue", "SBATCH_RESERVATION": "reservation", "SBATCH_SIGNAL": "signal",
    "SBATCH_SPREAD_JOB": "spread-job", "SBATCH_THREAD_SPEC": "thread-spec", "SBATCH_TIMELIMIT": "time",
    "SBATCH_USE_MIN_NODES": "use-min-nodes", "SBATCH_WAIT": "wait", "SBATCH_WAIT_ALL_NODES": "wait-all-nodes",
    "SBATCH_WCKEY": "wckey",
}
