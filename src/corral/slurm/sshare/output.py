"""sshare as a pure function: options, the controller's fair-share rows (FairShareOut dicts) and the
tenancy document's users in, what sshare prints out (sshare/process.c, 22.05, as Slurm prints the
classic factor, PriorityFlags=NO_FAIR_TREE, which is corral's).

The tree is Slurm's association tree: a `root` row, each account below its parent, a user's row
below each account of the user. corral charges usage to accounts and gives a user its account's
factor, which is Slurm's `Fairshare=parent`: user rows show RawShares `parent`, the account's
NormShares and FairShare, and no usage of their own (empty). NormShares is an association's share
among its siblings; EffectvUsage is corral's normalized usage (the factor's input), the root's 1.
GrpTRESMins and TRESRunMins are empty: corral has no TRES-minute limits."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.printfields import PrintField, cell, double, header, line
from corral.slurm.common.record import Record
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


def share_rows(options: SshareOptions, fairshare: Sequence[Mapping], users: Sequence[Mapping], me: str,
               cluster: str) -> list[ShareRow]:
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
    rows: list[ShareRow] = []

    def walk(name: str, depth: int) -> None:
        values = _account_values(name, by_name, siblings, total)
        if not options.users_only:
            rows.append(ShareRow(depth, name, None, {**values, "Cluster": cluster}))
        for user in sorted(members.get(name, ())):
            if wanted is None or user in wanted:
                rows.append(ShareRow(depth + 1, name, user, {
                    "Cluster": cluster, "RawShares": "parent", "NormShares": values["NormShares"],
                    "FairShare": values["FairShare"]}))
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
                  cluster: str) -> tuple[str, str, int]:
    fields = choose_fields(options.format or (LONG_FORMAT if options.long else DEFAULT_FORMAT))
    out = "" if options.noheader else header(fields, options.parsable)
    for row in share_rows(options, fairshare, users, me, cluster):
        out += line([_cell(f, row, options.parsable) for f in fields], options.parsable)
    return out, "".join(options.warnings), 0
