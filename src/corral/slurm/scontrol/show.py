"""`scontrol show partition|node|config|hostnames|hostlist` from corral's records.

Node keys corral does not track (Arch, OS, CPULoad, FreeMem, boot times, slurmd port and version)
print Slurm's "not known" values; the partition keys are Slurm's defaults for what corral does not
configure (no QOS, no preemption, no group limits)."""
from __future__ import annotations

from _collections_abc import Iterable, Mapping, Sequence

from corral import gpu_models, hostlist
from corral.slurm.common import states, timefmt, tres


def _block(lines: Sequence[str], one_liner: bool, trailing: str = "") -> str:
    if one_liner:
        return " ".join(lines) + "\n"
    return lines[0] + trailing + "\n" + "".join(f"   {line}\n" for line in lines[1:]) + "\n"


def _limit(seconds: int | None, unset: str) -> str:
    return unset if seconds is None else timefmt.time_limit(seconds)


def partition_lines(partition: Mapping, nodes: Sequence[Mapping]) -> list[str]:
    members = [n for n in nodes if n["name"] in set(partition.get("nodes", ()))]
    cpus = sum(int(n.get("cpus", 0)) for n in members)
    total = {"cpu": str(cpus), "mem": tres.mem_text(sum(int(n.get("mem_mib", 0)) for n in members)),
             "node": str(len(members)), "billing": str(cpus)}
    gpus = sum(len(n.get("gpus") or ()) for n in members)
    if gpus:
        total["gres/gpu"] = str(gpus)
    names = hostlist.compress([n["name"] for n in members]) if members else "(null)"
    return [
        f"PartitionName={partition['name']}",
        "AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL",
        f"AllocNodes=ALL Default={'YES' if partition.get('default') else 'NO'} QoS=N/A",
        f"DefaultTime={_limit(partition.get('default_time_s'), 'NONE')} DisableRootJobs=NO ExclusiveUser=NO "
        "GraceTime=0 Hidden=NO",
        f"MaxNodes=UNLIMITED MaxTime={_limit(partition.get('max_time_s'), 'UNLIMITED')} MinNodes=0 LLN=NO "
        "MaxCPUsPerNode=UNLIMITED",
        f"Nodes={names}",
        f"PriorityJobFactor={partition.get('priority_job_factor', 1)} PriorityTier=1 RootOnly=NO ReqResv=NO "
        "OverSubscribe=NO",
        "OverTimeLimit=NONE PreemptMode=OFF",
        f"State={'UP' if partition.get('up', True) else 'DOWN'} TotalCPUs={cpus} TotalNodes={len(members)} "
        "SelectTypeParameters=NONE",
        "JobDefaults=(null)",
        "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        f"TRES={tres.scontrol_text(total)}",
    ]


def render_partitions(partitions: Iterable[Mapping], nodes: Sequence[Mapping], *, one_liner: bool = False) -> str:
    return "".join(_block(partition_lines(p, nodes), one_liner) for p in partitions)


def node_lines(node: Mapping, now: float, time_format: str | None = None) -> list[str]:
    gpus = len(node.get("gpus") or ())
    cpus = int(node.get("cpus", 0))
    config = {"cpu": str(cpus), "mem": tres.mem_text(int(node.get("mem_mib", 0))), "billing": str(cpus)}
    alloc = {"cpu": str(node.get("cpus_alloc", 0))} if node.get("cpus_alloc") else {}
    if node.get("mem_alloc_mib"):
        alloc["mem"] = tres.mem_text(int(node["mem_alloc_mib"]))
    if gpus:
        config["gres/gpu"] = str(gpus)
        if node.get("gpus_alloc"):
            alloc["gres/gpu"] = str(node["gpus_alloc"])
    seen = timefmt.make_time_str(node.get("last_seen"), now, time_format, unset="None")
    address = node.get("address") or node["name"]
    lines = [
        f"NodeName={node['name']} Arch=(null) CoresPerSocket=1",
        f"CPUAlloc={node.get('cpus_alloc', 0)} CPUEfctv={cpus} CPUTot={cpus} CPULoad=N/A",
        f"AvailableFeatures={','.join(node.get('features') or ()) or '(null)'}",
        f"ActiveFeatures={','.join(node.get('features') or ()) or '(null)'}",
        f"Gres={gpu_models.gres(node['gpus'][0].get('model') or '', gpus) if gpus else '(null)'}",
        f"NodeAddr={address} NodeHostName={address} Version=(null)",
        "OS=(null)",
        f"RealMemory={node.get('mem_mib', 0)} AllocMem={node.get('mem_alloc_mib', 0)} FreeMem=N/A "
        f"Sockets={cpus} Boards=1",
        f"State={states.node_state_scontrol(node)} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
        f"Partitions={','.join(node.get('partitions') or ())} ",
        "BootTime=None SlurmdStartTime=None",
        f"LastBusyTime={seen}",
        f"CfgTRES={tres.scontrol_text(config)}",
        f"AllocTRES={tres.scontrol_text(alloc)}",
        "CapWatts=n/a",
        "CurrentWatts=0 AveWatts=0",
        "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]
    if node.get("drain_reason"):
        lines.append(f"Reason={node['drain_reason']}")
    return lines


def render_nodes(nodes: Iterable[Mapping], now: float, *, one_liner: bool = False,
                 time_format: str | None = None) -> str:
    # Slurm's first line ends with a space ("CoresPerSocket=1 "), and so does its one-liner.
    return "".join(_block(node_lines(n, now, time_format), one_liner, trailing="" if one_liner else " ")
                   for n in nodes)


def render_config(pairs: Iterable[tuple[str, str]], now: float, time_format: str | None = None,
                  footer: str | None = None) -> str:
    """`Configuration data as of <time>` and `%-23s = %s` lines, then an optional footer block."""
    head = f"Configuration data as of {timefmt.make_time_str(now, now, time_format)}\n"
    body = "".join(f"{key:<23} = {value}\n" for key, value in pairs)
    return head + body + (f"\n{footer}\n" if footer else "")


def show_hostnames(expression: str | None) -> tuple[str, str]:
    """(stdout, stderr) of `scontrol show hostnames [list]`; the caller passes SLURM_NODELIST when
    no list is given. Slurm exits 0 even on errors here."""
    if not expression:
        return "", "scontrol: error: host list is empty\n"
    try:
        hosts = hostlist.expand(expression)
    except hostlist.HostlistError:
        return "", f"Invalid hostlist: {expression}\n"
    return "".join(f"{h}\n" for h in hosts), ""


def show_hostlist(names: str, *, sort: bool = False) -> str:
    """`scontrol show hostlist a,b,c` (compressed); Slurm merges ranges in order, `hostlistsorted` sorts."""
    hosts = hostlist.expand(names)
    return (hostlist.compress(sorted(hosts, key=hostlist.sort_key) if sort else hosts) or "") + "\n"
