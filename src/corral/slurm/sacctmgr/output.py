"""sacctmgr's show tables as pure functions: options and the tenancy document (TenancySpec's JSON) in,
what sacctmgr prints out (sacctmgr/association_functions.c, qos_functions.c, ..., 22.05).

corral's document maps to Slurm's associations: a `root` account, each account below its parent
(Share: its shares), each user below each of its accounts with Share `parent` (a user takes its
account's fair share). Limits: an account's max_running_jobs, max_submit_jobs and max_gpus are its
association's GrpJobs, GrpSubmit and GrpTRES=gres/gpu=N; a user's are MaxJobs, MaxSubmit and
GrpTRES on each of its rows. QOS: priority, preempts (Preempt), preempt_mode (PreemptMode), grace_s
(GraceTime), min_runtime_s (PreemptExemptTime) and max_wall_s (MaxWall); every association may use
every QOS. Columns corral has no value for are empty, as Slurm prints an unset limit."""
from __future__ import annotations

from _collections_abc import Callable, Mapping, Sequence

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.printfields import PrintField, cell, header, line
from corral.slurm.sacctmgr.opts import SacctmgrOptions

ROOT = "root"
ASSOC_FIELDS = ("Cluster:10", "Account:10", "User:10", "Partition:10", "Share:9", "Priority:10", "GrpJobs:7",
                "GrpTRES:13", "GrpSubmit:9", "GrpWall:11", "GrpTRESMins:13", "MaxJobs:7", "MaxTRES:13",
                "MaxTRESPerNode:14", "MaxSubmit:9", "MaxWall:11", "MaxTRESMins:13", "QOS:20", "Def QOS:9",
                "GrpTRESRunMins:13")
QOS_FIELDS = ("Name:10", "Priority:10", "GraceTime:10", "Preempt:10", "PreemptExemptTime:19", "PreemptMode:11",
              "Flags:40", "UsageThres:10", "UsageFactor:11", "GrpTRES:13", "GrpTRESMins:13", "GrpTRESRunMins:13",
              "GrpJobs:7", "GrpSubmit:9", "GrpWall:11", "MaxTRES:13", "MaxTRESPerNode:14", "MaxTRESMins:13",
              "MaxWall:11", "MaxTRESPU:13", "MaxJobsPU:9", "MaxSubmitPU:11", "MaxTRESPA:13", "MaxJobsPA:9",
              "MaxSubmitPA:11", "MinTRES:13")
ACCOUNT_FIELDS = ("Account:10", "Descr:20", "Org:20")
USER_FIELDS = ("User:10", "Def Acct:10", "Admin:9")
# Other names sacctmgr takes in format= (lower case, without spaces) for a column.
ALIASES = {"shares": "Share", "fairshare": "Share", "defaultqos": "Def QOS", "defqos": "Def QOS",
           "description": "Descr", "organization": "Org", "defaultaccount": "Def Acct", "defacct": "Def Acct",
           "adminlevel": "Admin", "grptresrunmin": "GrpTRESRunMins"}
DEFAULTS = {"assoc": ASSOC_FIELDS, "qos": QOS_FIELDS, "account": ACCOUNT_FIELDS, "user": USER_FIELDS}


def _fields(spec: Sequence[str]) -> list[PrintField]:
    return [PrintField(name, int(width)) for name, _, width in (s.partition(":") for s in spec)]


def choose_fields(options: SacctmgrOptions) -> list[PrintField]:
    known = _fields(DEFAULTS[options.entity])
    if options.tree:  # the tree's indented accounts are left-justified, 20 wide unless a width is given
        known = [f.replace(width=-20) if f.name == "Account" else f for f in known]
    if options.format is None:
        fields = known
    else:
        fields = []
        for item in (i for i in options.format.split(",") if i):
            name, _, width = item.partition("%")
            field = _named(known, name)
            if field is None:
                raise SlurmCommandError(f"Unknown field '{name}'\n", 1)
            fields.append(field.replace(width=int(width)) if width.lstrip("-").isdigit() and int(width) else field)
    return fields


def _named(known: Sequence[PrintField], name: str) -> PrintField | None:
    key = name.lower().replace(" ", "")
    if key in ALIASES:
        key = ALIASES[key].lower().replace(" ", "")
    exact = [f for f in known if f.name.lower().replace(" ", "") == key]
    prefixed = [f for f in known if f.name.lower().replace(" ", "").startswith(key)]
    found = exact or prefixed
    return found[0] if key and found else None


def duration_text(seconds: float | None) -> str:
    """secs2time_str: [D-]HH:MM:SS; None (unset) is empty."""
    if seconds is None:
        return ""
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def _limit_cells(limit: Mapping | None, kind: str) -> dict[str, str]:
    if not limit:
        return {}
    jobs, submit, gpus = limit.get("max_running_jobs"), limit.get("max_submit_jobs"), limit.get("max_gpus")
    prefix = "Grp" if kind == "account" else "Max"
    cells = {f"{prefix}Jobs": "" if jobs is None else str(jobs),
             f"{prefix}Submit": "" if submit is None else str(submit)}
    cells["GrpTRES"] = "" if gpus is None else f"gres/gpu={gpus}"
    return cells


def assoc_rows(options: SacctmgrOptions, tenancy: Mapping, cluster: str) -> list[tuple[int, dict[str, str]]]:
    """(depth, cells) per association, in the tree's order: an account, its users, its sub-accounts."""
    accounts = [a for a in tenancy.get("accounts", []) if a["name"] != ROOT]
    children: dict[str, list[Mapping]] = {}
    for account in accounts:
        children.setdefault(account.get("parent") or ROOT, []).append(account)
    members: dict[str, list[str]] = {}
    for user in tenancy.get("users", []):
        for name in user.get("accounts", ()):
            members.setdefault(name, []).append(user["name"])
    limits = {(("user", lim["user"]) if lim.get("user") else ("account", lim["account"])): lim
              for lim in tenancy.get("limits", [])}
    qos = ",".join(sorted(q["name"] for q in tenancy.get("qos", [])))
    default_qos = tenancy.get("default_qos", "normal")
    common = {"Cluster": cluster, "QOS": qos, "Def QOS": "" if default_qos == "normal" else default_qos}
    rows: list[tuple[int, dict[str, str]]] = []

    def walk(name: str, shares: int, depth: int) -> None:
        if _wanted(options.accounts, name) and options.users is None:
            rows.append((depth, {**common, "Account": name, "Share": str(shares),
                                 **_limit_cells(limits.get(("account", name)), "account")}))
        for user in sorted(members.get(name, ())):
            if _wanted(options.accounts, name) and _wanted(options.users, user):
                rows.append((depth + 1, {**common, "Account": name, "User": user, "Share": "parent",
                                         **_limit_cells(limits.get(("user", user)), "user")}))
        for child in sorted(children.get(name, ()), key=lambda a: a["name"]):
            walk(child["name"], child.get("shares", 1), depth + 1)

    walk(ROOT, 1, 0)
    return rows


def _wanted(chosen: Sequence[str] | None, name: str) -> bool:
    return chosen is None or name in chosen


def qos_rows(options: SacctmgrOptions, tenancy: Mapping) -> list[dict[str, str]]:
    return [{"Name": q["name"], "Priority": str(q.get("priority", 0)), "GraceTime": duration_text(q.get("grace_s", 0)),
             "Preempt": ",".join(q.get("preempts", ())), "PreemptMode": q.get("preempt_mode", "requeue"),
             "PreemptExemptTime": duration_text(q.get("min_runtime_s")) if q.get("min_runtime_s") else "",
             "UsageFactor": "1.000000", "MaxWall": duration_text(q.get("max_wall_s"))}
            for q in tenancy.get("qos", []) if _wanted(options.names, q["name"])]


def account_rows(options: SacctmgrOptions, tenancy: Mapping) -> list[dict[str, str]]:
    """Slurm's defaults for what corral's accounts do not hold: the description and the organization
    are the account's name."""
    chosen = options.names if options.names is not None else options.accounts
    rows = [{"Account": a["name"], "Descr": a["name"], "Org": a["name"]}
            for a in tenancy.get("accounts", []) if a["name"] != ROOT]
    rows.append({"Account": ROOT, "Descr": "default root account", "Org": ROOT})
    return sorted((r for r in rows if _wanted(chosen, r["Account"])), key=lambda r: r["Account"])


def user_rows(options: SacctmgrOptions, tenancy: Mapping) -> list[dict[str, str]]:
    """Admin: root is corral's administrator (uid 0); those the controller's [auth] admins names are not in
    the tenancy document, and show None."""
    chosen = options.names if options.names is not None else options.users
    return [{"User": u["name"], "Def Acct": u.get("default_account") or u["accounts"][0],
             "Admin": "Administrator" if u["name"] == ROOT else "None"}
            for u in sorted(tenancy.get("users", []), key=lambda u: u["name"]) if _wanted(chosen, u["name"])]


def _render(options: SacctmgrOptions, fields: Sequence[PrintField], rows: Sequence[tuple[int, Mapping[str, str]]],
            text_of: Callable[[PrintField, int, Mapping[str, str]], str]) -> str:
    out = "" if options.noheader else header(fields, options.parsable)
    for depth, row in rows:
        out += line([cell(text_of(f, depth, row), f.width, options.parsable) for f in fields], options.parsable)
    return out


def sacctmgr_output(options: SacctmgrOptions, tenancy: Mapping, cluster: str) -> tuple[str, str, int]:
    fields = choose_fields(options)
    if options.entity == "assoc":
        rows = assoc_rows(options, tenancy, cluster)
    else:
        flat = {"qos": qos_rows, "account": account_rows, "user": user_rows}[options.entity](options, tenancy)
        rows = [(0, row) for row in flat]

    def text_of(field: PrintField, depth: int, row: Mapping[str, str]) -> str:
        text = row.get(field.name, "")
        return " " * depth + text if options.tree and field.name == "Account" else text

    return _render(options, fields, rows, text_of), "".join(options.warnings), 0
