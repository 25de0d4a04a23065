"""sreport's reports as pure functions: options, the usage (usage.py) and the cluster's capacity in,
what sreport prints out (sreport/cluster_reports.c, user_reports.c, common.c, 22.05). corral has
`cluster AccountUtilizationByUser`, `cluster Utilization` and `user TopUsage`."""
from __future__ import annotations

import time
from _collections_abc import Callable, Mapping, Sequence

from corral.slurm.common.printfields import PrintField, cell, header, line
from corral.slurm.sreport.opts import SreportOptions
from corral.slurm.sreport.usage import ROOT, Tree, Usage, Window, add

BANNER = "-" * 80 + "\n"
TITLES = {"AccountUtilizationByUser": "Cluster/Account/User Utilization", "Utilization": "Cluster Utilization",
          "TopUsage": "Top {count} Users"}


def usage_text(value: float, total: float, options: SreportOptions) -> str:
    """sreport_print_time: the TRES-seconds in the -t unit (%.0f), with or as a share of `total`."""
    _, _, unit_s, with_percent = options.time_format
    percent = value / (total or 1) * 100
    if not unit_s:
        return f"{percent:.2f}%"
    amount = f"{value:.0f}" if unit_s == 1 else f"{value / unit_s:.0f}"
    return f"{amount}({percent:.2f}%)" if with_percent else amount


def _time_text(moment: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(moment))


def banner(options: SreportOptions, window: Window) -> str:
    if options.noheader:
        return ""
    title = TITLES[options.report].format(count=options.top_count)
    period = f"{_time_text(window.start)} - {_time_text(window.end - 1)}"
    secs = "" if options.report == "Utilization" else f" ({window.seconds} secs)"
    what = "" if not options.time_format[2] else "CPU " if options.tres == ("cpu",) else "TRES "
    return f"{BANNER}{title} {period}{secs}\nUsage reported in {what}{options.time_format[1]}\n{BANNER}"


def _usage_width(options: SreportOptions) -> int:
    return 17 if options.time_format[3] and options.time_format[2] else 8


def _table(options: SreportOptions, leading: Sequence[PrintField], usage_names: Sequence[str],
           rows: Sequence[tuple[Sequence[str], Callable[[str], tuple[float, float]]]]) -> str:
    """Leading text columns, then per TRES (a "TRES Name" column when -T names other than cpu) the
    usage columns; `rows`: (leading texts, TRES -> (seconds, total) per usage column name)."""
    width = _usage_width(options)
    per_tres = options.tres != ("cpu",)
    usage_fields = [PrintField(n, width) for n in usage_names]
    fields = [*leading, *([PrintField("TRES Name", 14)] if per_tres else []), *usage_fields]
    out = "" if options.noheader else header(fields, options.parsable)
    for texts, values in rows:
        for tres in options.tres:
            cells = [cell(t, f.width, options.parsable) for t, f in zip(texts, leading, strict=True)]
            if per_tres:
                cells.append(cell(tres, 14, options.parsable))
            for name in usage_names:
                cells.append(_cut(usage_text(*values(f"{name}:{tres}"), options), width, options.parsable))
            out += line(cells, options.parsable)
    return out


def _cut(text: str, width: int, parsable: int) -> str:
    """sreport prints its usage with %*.*s: cut without a `+`."""
    return text if parsable else text[:width].rjust(width)


def _with_energy(options: SreportOptions, names: Sequence[str]) -> list[str]:
    return [*names, "Energy"] if options.tres == ("cpu",) else list(names)


def account_utilization_by_user(options: SreportOptions, cluster: str, usage: Sequence[Usage], tree: Tree,
                                capacity: Mapping[str, float], names: Callable[[str], str]) -> str:
    per_account: dict[str, dict[str, float]] = {}
    per_user: dict[tuple[str, str], dict[str, float]] = {}
    for item in usage:
        for account in tree.ancestors(item.account):
            add(per_account.setdefault(account, {}), item.seconds)
        add(per_user.setdefault((item.account, item.user), {}), item.seconds)
    rows = []

    def walk(account: str) -> None:
        if account not in per_account:
            return
        rows.append(((cluster, account, "", ""), per_account[account]))
        for (owner, user), used in sorted(per_user.items()):
            if owner == account:
                rows.append(((cluster, account, user, names(user)), used))
        for child in tree.children(account):
            walk(child)

    walk(ROOT)
    leading = [PrintField("Cluster", 9), PrintField("Account", 15), PrintField("Login", 9),
               PrintField("Proper Name", 15)]
    return _table(options, leading, _with_energy(options, ["Used"]),
                  [(texts, _used(used, capacity)) for texts, used in rows])


def _used(used: Mapping[str, float], capacity: Mapping[str, float]) -> Callable[[str], tuple[float, float]]:
    def value(key: str) -> tuple[float, float]:
        column, _, tres = key.partition(":")
        if column == "Energy":
            return 0.0, 0.0
        return used.get(tres, 0.0), capacity.get(tres, 0.0)
    return value


def top_usage(options: SreportOptions, cluster: str, usage: Sequence[Usage], capacity: Mapping[str, float],
              names: Callable[[str], str]) -> str:
    per_user: dict[tuple[str, str], dict[str, float]] = {}
    for item in usage:
        add(per_user.setdefault((item.user, "" if options.group else item.account), {}), item.seconds)
    accounts: dict[str, set[str]] = {}
    for item in usage:
        accounts.setdefault(item.user, set()).add(item.account)
    first = options.tres[0]
    ranked = sorted(per_user.items(), key=lambda kv: (-kv[1].get(first, 0.0), kv[0]))[:options.top_count]
    leading = [PrintField("Cluster", 9), PrintField("Login", 9), PrintField("Proper Name", 15),
               PrintField("Account", 15)]
    rows = [((cluster, user, names(user), account or ",".join(sorted(accounts[user]))), _used(used, capacity))
            for (user, account), used in ranked]
    return _table(options, leading, _with_energy(options, ["Used"]), rows)


UTILIZATION_COLUMNS = ("Allocated", "Down", "PLND Down", "Idle", "Planned", "Reported")


def utilization(options: SreportOptions, cluster: str, usage: Sequence[Usage], capacity: Mapping[str, float]) -> str:
    allocated: dict[str, float] = {}
    for item in usage:
        add(allocated, item.seconds)

    def value(key: str) -> tuple[float, float]:
        column, _, tres = key.partition(":")
        reported = capacity.get(tres, 0.0)
        used = min(allocated.get(tres, 0.0), reported) if reported else allocated.get(tres, 0.0)
        amounts = {"Allocated": used, "Idle": max(reported - used, 0.0), "Reported": reported}
        return amounts.get(column, 0.0), reported

    return _table(options, [PrintField("Cluster", 9)], UTILIZATION_COLUMNS, [((cluster,), value)])
