"""Job records kept as the controller sends them with `columns=true`: a list per field, never a dict per job.

A listing of 100,000 jobs spent most of its client time on work per job: a dict built per record, then a
Python call per record and column (state, TIME, reason, ...), each reading the dict. Most of those values
repeat (every pending job's state, TIME, partition and reason are alike), so `values()` calls a record's
function once per distinct combination of the fields it reads and maps the answer back onto every job with
C-level builtins (zip, dict, map): the same result as calling it per record, as long as the function reads
nothing but the fields named (squeue's Field.reads and its sort and filter reads declare them; tests check
them against whole records)."""
from __future__ import annotations

from _collections_abc import Callable, Mapping, Sequence
from itertools import repeat

# Types whose equal values hash alike and print alike within one column: a column of one numeric type (and
# None, text) may share a function's answer between equal keys. 1, 1.0 and True are equal but print apart.
_NUMBERS = frozenset({int, float, bool})
_PLAIN = frozenset({str, type(None)}) | _NUMBERS
# group_by() keeps its groups when there are at most one per this many jobs.
_FEW_GROUPS = 8


class JobColumns:
    """Every job's value of each field, a list per field, the jobs in the same order in each."""

    def __init__(self, fields: Sequence[str], columns: Sequence[list]) -> None:
        if len(columns) != len(fields):
            raise ValueError(f"{len(columns)} columns for {len(fields)} fields")
        sizes = {len(column) for column in columns}
        if len(sizes) > 1:
            raise ValueError("columns of different lengths")
        self.fields = tuple(fields)
        self.columns: dict[str, list] = dict(zip(self.fields, columns, strict=True))
        self.size = sizes.pop() if sizes else 0
        self._shareable: dict[str, bool] = {}
        # group_by(): the fields grouped, each job's group, and one record per group (its first job's fields).
        self._grouped: frozenset[str] = frozenset()
        self._group_of: list[int] = []
        self._group_records: list[dict] = []

    @classmethod
    def of_records(cls, fields: Sequence[str], records: Sequence[Mapping]) -> JobColumns:
        """From whole records or rows (a controller that sends no columns): each record's value of each field."""
        return cls(fields, [[record.get(name) for record in records] for name in fields])

    def __len__(self) -> int:
        return self.size

    def column(self, name: str) -> list:
        return self.columns[name]

    def has(self, names: Sequence[str]) -> bool:
        return all(name in self.columns for name in names)

    def records(self) -> list[dict]:
        """A dict per job, as records_of_columns gives them (for what has no column-wise path)."""
        return list(map(dict, map(zip, repeat(self.fields), zip(*self.columns.values()))))  # noqa: B905

    def taken(self, order: Sequence[int]) -> JobColumns:
        """These jobs (by index), in this order."""
        return JobColumns(self.fields, [list(map(column.__getitem__, order)) for column in self.columns.values()])

    def group_by(self, names: Sequence[str]) -> None:
        """Number the distinct combinations of these fields once, so that values() of a function reading
        only some of them is called once per group and mapped back by a list index rather than by hashing
        a key per job again. Kept only when the groups are few (pending jobs alike); with a group per job or
        nearly (running jobs' start times), values() keys each function by its own reads instead."""
        names = tuple(dict.fromkeys(name for name in names if name in self.columns))
        if not names or not all(map(self._can_share, names)):
            return
        columns = [self.columns[name] for name in names]
        keys = list(zip(*columns))  # noqa: B905 (same lengths)
        numbers = {key: number for number, key in enumerate(dict.fromkeys(keys))}
        if len(numbers) * _FEW_GROUPS > self.size:
            return
        self._grouped = frozenset(names)
        self._group_of = list(map(numbers.__getitem__, keys))
        self._group_records = [dict(zip(names, key)) for key in numbers]  # noqa: B905

    def values(self, function: Callable[[Mapping], object], reads: Sequence[str]) -> list:
        """[function(record) for every job], a record holding the fields `reads` (which must be all that the
        function reads), called once per distinct combination of them."""
        if not reads:
            return [function({})] * self.size
        if self._grouped.issuperset(reads):
            by_group = list(map(function, self._group_records))
            return list(map(by_group.__getitem__, self._group_of))
        columns = [self.columns[name] for name in reads]
        keys: Sequence = columns[0] if len(columns) == 1 else list(zip(*columns))  # noqa: B905 (same lengths)
        if not all(map(self._can_share, reads)):
            return [function(dict(zip(reads, key))) for key in zip(*columns)]  # noqa: B905
        if len(columns) == 1:
            name = reads[0]
            answers = {key: function({name: key}) for key in dict.fromkeys(keys)}
        else:
            answers = {key: function(dict(zip(reads, key))) for key in dict.fromkeys(keys)}  # noqa: B905
        return list(map(answers.__getitem__, keys))

    def _can_share(self, name: str) -> bool:
        """Whether equal values of this column may share an answer: hashable, of one numeric type at most,
        and no negative zero (equal to 0.0, printed apart)."""
        known = self._shareable.get(name)
        if known is None:
            column = self.columns[name]
            types = set(map(type, column))
            known = types <= _PLAIN and len(types & _NUMBERS) <= 1
            if known and float in types and 0.0 in column:
                known = "-0.0" not in map(repr, column)  # repr() of each by map(): no Python call per value
            self._shareable[name] = known
        return known


def join_lines(cells: Sequence[Sequence[str]], size: int, separator: str = "") -> list[str]:
    """The lines of a table built a column at a time: each job's cells joined."""
    if not cells:
        return [""] * size
    return list(map(separator.join, zip(*cells)))  # noqa: B905 (every column has a cell per job)
