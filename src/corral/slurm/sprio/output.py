"""sprio as a pure function: options, the controller's pending-job priorities (PriorityOut dicts)
and the priority weights in, what sprio prints out (sprio/print.c, 22.05).

corral's factors map to Slurm's columns: age -> AGE, fairshare -> FAIRSHARE, job_size -> JOBSIZE,
partition_factor -> PARTITION, qos_factor -> QOS. corral has no site factor, association factor
or TRES weights (SITE 0, ASSOC 0, TRES empty). corral's `nice` is an adjustment added to the
priority (JobSubmit.priority); Slurm's NICE is subtracted, so NICE shows its negation."""
from __future__ import annotations

from _collections_abc import Callable, Mapping, Sequence

from corral.slurm.common import jobids
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.formatspec import print_str
from corral.slurm.common.record import Record
from corral.slurm.sprio.opts import SprioOptions

NO_JOBS = "Unable to find jobs matching user/id(s) specified\n"
LONG_FORMAT = "%.15i %9r %.8u %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %.11N %.20T"
LONG_NORMALIZED_FORMAT = "%.15i %9r %.8u %10y %10a %10b %10f %10j %10p %10q %20t"
# Weighted factor letters, in sprio's column order, with the weight that shows them by default.
_FACTOR_COLUMNS = (("A", "weight_age"), ("B", "weight_assoc"), ("F", "weight_fairshare"),
                   ("J", "weight_job_size"), ("P", "weight_partition"), ("Q", "weight_qos"), ("T", "weight_tres"))
_PRIORITY_SCALE = 0xFFFFFFFF  # the normalized PRIORITY is the priority over the largest one


class SprioField(Record):
    header: str
    value: Callable[[Mapping], object]  # a job's value; None prints as C's "(null)"
    weight: Callable[[Mapping], object]  # the -w line's value, from the weights


def _number(value: float) -> str:
    return f"{value:.0f}"  # "%.0f"


def _weighted(header: str, factor: str, weight: str) -> SprioField:
    return SprioField(header, lambda j: _number(j.get(factor, 0)), lambda w: _number(w.get(weight, 0)))


def _normalized(header: str, factor: str, weight: str) -> SprioField:
    def value(job: Mapping) -> str:
        total = job["_weights"].get(weight, 0)
        return f"{(job.get(factor, 0) / total) if total else 0.0:.7f}"
    return SprioField(header, value, lambda w: _number(w.get(weight, 0)))


def _blank(_: Mapping) -> str:
    return ""


def _constant(text: str | None) -> Callable[[Mapping], str | None]:
    return lambda _: text


# Per letter of sprio's -o; upper case is the weighted factor, lower case the factor over its weight.
LETTERS: Mapping[str, SprioField] = {
    "i": SprioField("JOBID", lambda j: str(j["job_id"]), _constant("Weights")),
    "r": SprioField("PARTITION", lambda j: j.get("partition", ""), _blank),
    "u": SprioField("USER", lambda j: j.get("user", ""), _blank),
    "c": SprioField("CLUSTER", _constant(None), _constant(None)),  # Slurm's local cluster name is unset
    "Y": SprioField("PRIORITY", lambda j: str(int(j.get("priority", 0))), _blank),
    "y": SprioField("PRIORITY", lambda j: f"{int(j.get('priority', 0)) / _PRIORITY_SCALE:16.14f}", _blank),
    "S": SprioField("SITE", _constant("0"), _constant("1")),
    "A": _weighted("AGE", "age", "weight_age"), "a": _normalized("AGE", "age", "weight_age"),
    "B": SprioField("ASSOC", _constant("0"), _constant("0")),
    "b": SprioField("ASSOC", _constant("0.0000000"), _constant("0")),
    "F": _weighted("FAIRSHARE", "fairshare", "weight_fairshare"),
    "f": _normalized("FAIRSHARE", "fairshare", "weight_fairshare"),
    "J": _weighted("JOBSIZE", "job_size", "weight_job_size"),
    "j": _normalized("JOBSIZE", "job_size", "weight_job_size"),
    "P": _weighted("PARTITION", "partition_factor", "weight_partition"),
    "p": _normalized("PARTITION", "partition_factor", "weight_partition"),
    "Q": _weighted("QOS", "qos_factor", "weight_qos"), "q": _normalized("QOS", "qos_factor", "weight_qos"),
    "N": SprioField("NICE", lambda j: _number(-(j.get("nice") or 0)), _blank),
    "T": SprioField("TRES", _blank, _constant(None)), "t": SprioField("TRES", _blank, _blank),
}


class Column(Record):
    field: SprioField | None  # None: literal text (the prefix)
    width: int = 0
    right: bool = False
    suffix: str = ""


def default_format(options: SprioOptions, weights: Mapping[str, int]) -> str:
    """sprio's layout without -o: the columns whose weight is not zero, as sprio.c builds it."""
    if options.long:
        return LONG_NORMALIZED_FORMAT if options.normalized else LONG_FORMAT
    user = " %.8u" if options.users is not None else ""
    if options.normalized:
        spec = f"%.15i %9r{user} %10y"
        return spec + "".join(f" %{20 if c == 'T' else 10}{c.lower()}" for c, w in _FACTOR_COLUMNS if weights.get(w))
    spec = f"%.15i %9r{user} %.10Y %.10S"
    return spec + "".join(f" %.{20 if c == 'T' else 10}{c}" for c, w in _FACTOR_COLUMNS if weights.get(w))


def parse_format(spec: str) -> tuple[list[Column], list[str]]:
    """(columns, stderr lines). Unlike squeue, an unknown letter is dropped with its suffix."""
    columns, errors = [], []
    prefix = spec.partition("%")[0]
    if prefix:
        columns.append(Column(None, suffix=prefix))
    tokens = [t for t in spec.split("%") if t][1 if prefix else 0:]
    for token in tokens:
        right = token.startswith(".")
        digits_end = int(right)
        while digits_end < len(token) and token[digits_end].isdigit():
            digits_end += 1
        letter = token[digits_end: digits_end + 1]
        if letter in LETTERS:
            columns.append(Column(LETTERS[letter], int(token[int(right):digits_end] or 0), right,
                                  token[digits_end + 1:]))
        else:
            errors.append(f"sprio: error: Invalid job format specification: {letter}\n")
    return columns, errors


def _line(columns: Sequence[Column], text_of: Callable[[SprioField], object]) -> str:
    return "".join((print_str(text_of(c.field), c.width, c.right, True) if c.field else "") + c.suffix
                   for c in columns) + "\n"


_SORT_KEYS: Mapping[str, Callable[[Mapping], object]] = {
    "c": lambda j: "", "i": lambda j: j["job_id"], "N": lambda j: -j.get("nice", 0),
    "r": lambda j: j.get("partition", ""), "u": lambda j: j.get("user", ""), "A": lambda j: j.get("age", 0),
    "F": lambda j: j.get("fairshare", 0),
    "J": lambda j: j.get("job_size", 0), "P": lambda j: j.get("partition_factor", 0),
    "Q": lambda j: j.get("qos_factor", 0), "T": lambda j: 0, "Y": lambda j: j.get("priority", 0),
}


def sort_jobs(jobs: Sequence[Mapping], spec: str) -> list[Mapping]:
    """sort.c: the specification is read from its end, one letter at a time, `-` before a letter
    meaning descending; each letter sorts the list again (stable here, so ties keep job id order)."""
    ordered = sorted(jobs, key=lambda j: j["job_id"])
    for i in range(len(spec) - 1, -1, -1):
        letter = spec[i]
        if letter in ",-+":
            continue
        key = _SORT_KEYS.get(letter if letter in "ciNru" else letter.upper())
        if key is None:
            raise SlurmCommandError(f"sprio: error: Invalid sort specification: {letter}\n", 1)
        ordered.sort(key=key, reverse=i > 0 and spec[i - 1] == "-")
    return ordered


def _named(options: SprioOptions, priority: Mapping) -> bool:
    record = {**priority, "id": priority["job_id"]}
    return options.job_ids is None or any(jobids.names(ref, record) for ref in options.job_ids)


def sprio_output(options: SprioOptions, priorities: Sequence[Mapping], weights: Mapping[str, int]
                 ) -> tuple[str, str, int]:
    """(stdout, stderr, exit status). `priorities` are every pending job's; `weights` are
    PriorityWeights (weight_age, ...)."""
    columns, errors = parse_format(options.format or default_format(options, weights))
    warnings = "".join(options.warnings) + "".join(errors)
    header = "" if options.noheader else _line(columns, lambda f: f.header)
    if options.weights:
        return header + _line(columns, lambda f: f.weight(weights)), warnings, 0
    chosen = [p for p in priorities if _named(options, p) and (options.users is None or p.get("user") in options.users)]
    if options.job_ids is not None and not chosen:
        return NO_JOBS, warnings, 0
    chosen = [{**p, "_weights": weights} for p in chosen
              if options.partitions is None or p.get("partition") in options.partitions]
    rows = "".join(_line(columns, lambda f, job=job: f.value(job)) for job in sort_jobs(chosen, options.sort))
    return header + rows, warnings, 0
