"""How golden outputs are compared. Only these differences from real Slurm are tolerated:

1. Row order between rows that Slurm's sort cannot tell apart. squeue sorts by partition, state and
   priority and sacct lists by submission; ties come out in the controller's or the database's
   internal order. Such outputs are compared as header lines (exactly) plus the multiset of rows
   (or, for sacct, of job blocks: a job line with its step lines), and for squeue's default
   formats the sequence of the ST column (exactly).
2. The time of the query. A running job's TIME and TIME_LEFT, the `-l` banner and scontrol's
   RunTime depend on the second the command ran; each fixture is rendered with `now` set to the
   start of the recorded command and to one second later, and either must match exactly.
3. In `scontrol show job`: the session id of AllocNode:Sid (a process id), Scheduler (Main or
   Backfill: which of Slurm's two schedulers started the job), and MinMemoryNode (Slurm prints the
   explicit per-node request, 0 here, while the records carry the whole-node memory that ReqMem and
   TRES show; corral's records have one number for both).
4. In `scontrol show node`: keys corral does not know (Arch, CPULoad, Port, Version, OS, FreeMem,
   BootTime, SlurmdStartTime).
5. `scontrol show config`: the first lines only (the banner and the first settings).
"""
from __future__ import annotations

import re

_JOB_KEYS = (re.compile(r"(AllocNode:Sid=[^:\s]*):\d+"), re.compile(r"MinMemoryNode=\S+"),
             re.compile(r"Scheduler=\S+"))
_NODE_KEYS = re.compile(r"\b(Arch|CPULoad|Version|FreeMem|BootTime|SlurmdStartTime)=\S*|\bOS=.*$| Port=\S+")


def rows_and_header(text: str, header_lines: int) -> tuple[list[str], list[str]]:
    lines = text.splitlines()
    return lines[:header_lines], sorted(lines[header_lines:])


def sacct_blocks(text: str, header_lines: int) -> tuple[list[str], list[str]]:
    lines = text.splitlines()
    blocks: list[list[str]] = []
    for line in lines[header_lines:]:
        job_id = line.split("|")[0].split()[0] if line.strip() else ""
        if blocks and "." in job_id:
            blocks[-1].append(line)
        else:
            blocks.append([line])
    return lines[:header_lines], sorted("\n".join(b) for b in blocks)


def state_column(text: str, header_lines: int) -> list[str]:
    lines = text.splitlines()
    column = lines[header_lines - 1].split().index("ST")
    return [line.split()[column] for line in lines[header_lines:]]


def scontrol_job_blocks(text: str) -> list[str]:
    for pattern in _JOB_KEYS:
        text = pattern.sub(lambda m: (m.group(1) + ":*") if m.groups() else m.group(0).split("=")[0] + "=*", text)
    return sorted(text.split("\n\n"))


def scontrol_node(text: str) -> str:
    return "\n".join(_NODE_KEYS.sub(lambda m: "" if m.group(0).startswith(" Port") else m.group(0).split("=")[0] + "=*",
                                    line) for line in text.splitlines())
