"""sshare as a pure function: options, the controller's fair-share rows (FairShareOut dicts) and the
tenancy document's users in, what sshare prints out (sshare/process.c, 22.05, as Slurm prints the
classic factor, PriorityFlags=NO_FAIR_TREE, which is corral's).

The tree is Slurm's association tree: a `root` row, each account below its parent, a user's row
below each account of the user. corral charges usage to accounts and gives a user its account's
factor, which is Slurm's `Fairshare=parent`: user rows show RawShares `parent`, the account's
NormShares and FairShare, and no usage of their own (empty). NormShares is an association's share
among its siblings; EffectvUsage is corral's normalized usage (the factor's input), the root's 1.
TRESRunMins: the running jobs' TRES x the minutes left of their time limits, summed up the tree, in
Slurm's TRES order (energy, fs/disk, vmem and pages are 0); GrpTRESMins is empty: corral has no
TRES-minute limits."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.printfields import PrintField, cell, double, header, line
from corral.slurm.common.record import Record
from corral.slurm.common.tres import allocated_amounts
from corral.slurm.sshare.opts import SshareOptions

ROOT = "root"
DEFAULT_FORMAT = "A,User,RawShares,NormShares,RawUsage,Eff,Fairshare"
LONG_FORMAT = "A,User,RawShares,NormShares,RawUsage,NormUsage,Eff,Fairshare,GrpTRESMins,TRESRunMins"
# In process.c's order: a --format name picks the first field it is a prefix of (case-insensitive).
FIELDS = (
    PrintField("Account", -20), PrintField("Cluster", 10), PrintField("EffectvUsage", 13),
    PrintField("FairShare", 10), PrintField("LevelFS", 10), PrintField("ID", 6), PrintField("NormShares", 11),
    PrintField("NormUsage", 11), PrintField("Partition", 12), PrintField("RawShares", 10),
    PrintField("RawUsage", 11), PrintField("User", 10), PrintField("GrpTRESMins", 30),
    PrintField("TRESRunMins", 30),
)
NUMBERS = frozenset({"RawShares", "RawUsage", "ID"})  # printed whole, never cut
# The anchor's TRES (AccountingStorageTRES=gres/gpu), in Slurm's id order.
RUN_TRES = ("cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages", "gres/gpu")


class ShareRow(Record):
    depth: int
    account: str
    user: str | None
    values: Mapping[str, str]


def choose_fields(spec: str) -> list[PrintField]:
    chosen = []
    for item in (i for i in spec.split(",") if i):
        name, _, width = item.partition("%")
        field = next((f for f in FIELDS if f.name.lower().startswith(name.lower())), None)
        if field is None:
            raise SlurmCommandError(f'sshare: error: Invalid field requested: "{name}"\n', 1)
        chosen.append(field.replace(width=int(width)) if width.lstrip("-").isdigit() and int(width) else field)
    return chosen


def _account_values(name: str, by_name: Mapping[str, Mapping], siblings: Mapping[str, int], total: float
                    ) -> dict[str, str]:
    if name == ROOT and name not in by_name:
        # The root holds every share and all usage: its classic factor is 2^(-1/1).
        return {"RawShares": "", "NormShares": double(1.0), "RawUsage": str(int(total)), "NormUsage": "",
                "EffectvUsage": double(1.0), "FairShare": double(0.5)}
    a = by_name[name]
    return {"RawShares": str(a["shares"]), "NormShares": double(_level_share(a, siblings)),
            "RawUsage": str(int(a["raw_usage"])), "NormUsage": double(a["norm_usage"]),
            "EffectvUsage": double(a["norm_usage"]), "FairShare": double(a["fairshare"])}


def wants_run_minutes(options: SshareOptions) -> bool:
    return any(f.name == "TRESRunMins" for f in choose_fields(options.format or (LONG_FORMAT if options.long
                                                                                 else DEFAULT_FORMAT)))


def run_minutes(running: Sequence[Mapping], parent: Mapping[str, str | None]) -> dict[tuple[str, str], str]:
    """(account, "") and (account, user) -> TRESRunMins text, every account up to the root charged."""
    seconds: dict[tuple[str, str], dict[str, float]] = {}
    for job in running:
        left = max(float(job.get("time_limit_s") or 0) - float(job.get("elapsed_s") or 0), 0.0)
        account = job.get("account") or ""
        keys = [(account, str(job.get("user", "")))]
        chain: str | None = account
        while chain is not None and len(keys) <= len(parent) + 2:
            keys.append((chain, ""))
            chain = None if chain == ROOT else (parent.get(chain) or ROOT)
        for key in keys:
            total = seconds.setdefault(key, {})
            for name, amount in allocated_amounts(job).items():
                total[name] = total.get(name, 0.0) + amount * left
    return {key: ",".join(f"{name}={int(used.get(name, 0.0)) // 60}" for name in RUN_TRES)
            for key, used in seconds.items()}


def share_rows(options: SshareOptions, fairshare: Sequence[Mapping], users: Sequence[Mapping], me: str,
               cluster: str, running: Sequence[Mapping] = ()) -> list[ShareRow]:
    by_name = {a["account"]: a for a in fairshare}
    children: dict[str, list[str]] = {}
    for a in fairshare:
        children.setdefault(a["parent"] or ROOT, []).append(a["account"])
    siblings = {parent: sum(by_name[c]["shares"] for c in kids) for parent, kids in children.items()}
    members: dict[str, list[str]] = {}
    for user in users:
        for account in user.get("accounts", ()):
            members.setdefault(account, []).append(user["name"])
    wanted = None if options.all_users else set(options.users or (me,))
    total = sum(a["raw_usage"] for a in fairshare if not a["parent"])
    idle = ",".join(f"{name}=0" for name in RUN_TRES)
    run_mins = run_minutes(running, {a["account"]: a["parent"] for a in fairshare})
    rows: list[ShareRow] = []

    def walk(name: str, depth: int) -> None:
        values = _account_values(name, by_name, siblings, total)
        if not options.users_only:
            rows.append(ShareRow(depth, name, None, {**values, "Cluster": cluster,
                                                     "TRESRunMins": run_mins.get((name, ""), idle)}))
        for user in sorted(members.get(name, ())):
            if wanted is None or user in wanted:
                rows.append(ShareRow(depth + 1, name, user, {
                    "Cluster": cluster, "RawShares": "parent", "NormShares": values["NormShares"],
                    "FairShare": values["FairShare"], "TRESRunMins": run_mins.get((name, user), idle)}))
        for child in sorted(children.get(name, ())):
            walk(child, depth + 1)

    for top in (ROOT,) if options.accounts is None else options.accounts:
        if top in by_name or top == ROOT:
            walk(top, 0)
    return rows


def _level_share(account: Mapping, siblings: Mapping[str, int]) -> float:
    total = siblings.get(account["parent"] or ROOT, 0)
    return account["shares"] / total if total else 0.0


def _cell(field: PrintField, row: ShareRow, parsable: int) -> str:
    if field.name == "Account":
        text = " " * row.depth + row.account
    elif field.name == "User":
        text = row.user or ""
    else:
        text = row.values.get(field.name, "")
    return cell(text, field.width, parsable, cut=field.name not in NUMBERS)


def sshare_output(options: SshareOptions, fairshare: Sequence[Mapping], users: Sequence[Mapping], me: str,
                  cluster: str, running: Sequence[Mapping] = ()) -> tuple[str, str, int]:
    """`running`: the running jobs (for TRESRunMins)."""
    fields = choose_fields(options.format or (LONG_FORMAT if options.long else DEFAULT_FORMAT))
    out = "" if options.noheader else header(fields, options.parsable)
    for row in share_rows(options, fairshare, users, me, cluster, running):
        out += line([_cell(f, row, options.parsable) for f in fields], options.parsable)
    return out, "".join(options.warnings), 0
