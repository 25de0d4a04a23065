"""sacct's output: `--format` field lists and the fixed-width or parsable lines (common/print_fields.c).

Quirks kept from Slurm 22.05:
- a field name matches any case-insensitive prefix of a canonical name, the first in sacct's table
  order winning (`st` is Start, not State); headers print the canonical name;
- a width given to a field (`State%8`) applies to every column of that field: Slurm stores it in
  the shared field table, the last one given winning;
- fixed-width headers are cut to the width without a mark, values of text fields get a `+`."""
from __future__ import annotations

from _collections_abc import Callable, Iterable, Mapping, Sequence

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.record import Record
from corral.slurm.sacct.fields import FIELDS, AcctField, AcctView

DEFAULT_FIELDS = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
BRIEF_FIELDS = "JobID,State,ExitCode"
LONG_FIELDS = (
    "JobID,JobIDRaw,JobName,Partition,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,MaxRSS,MaxRSSNode,"
    "MaxRSSTask,AveRSS,MaxPages,MaxPagesNode,MaxPagesTask,AvePages,MinCPU,MinCPUNode,MinCPUTask,AveCPU,"
    "NTasks,AllocCPUS,Elapsed,State,ExitCode,AveCPUFreq,ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,ReqMem,"
    "ConsumedEnergy,MaxDiskRead,MaxDiskReadNode,MaxDiskReadTask,AveDiskRead,MaxDiskWrite,MaxDiskWriteNode,"
    "MaxDiskWriteTask,AveDiskWrite,ReqTRES,AllocTRES,TRESUsageInAve,TRESUsageInMax,TRESUsageInMaxNode,"
    "TRESUsageInMaxTask,TRESUsageInMin,TRESUsageInMinNode,TRESUsageInMinTask,TRESUsageInTot,"
    "TRESUsageOutMax,TRESUsageOutMaxNode,TRESUsageOutMaxTask,TRESUsageOutAve,TRESUsageOutTot"
)
PARSABLE = "parsable"  # -p: a delimiter after every field
PARSABLE2 = "parsable2"  # -P: no delimiter after the last field


class Column(Record):
    field: AcctField
    width: int


class Layout(Record):
    columns: tuple[Column, ...]
    parsable: str | None = None  # None, PARSABLE or PARSABLE2
    delimiter: str = "|"
    header: bool = True
    steps: bool = True  # -X drops the step rows


def find_field(name: str) -> AcctField | None:
    lowered = name.lower()
    return next((f for f in FIELDS if f.name.lower().startswith(lowered)), None) if name else None


def parse_fields(spec: str) -> tuple[Column, ...]:
    """`JobID,JobName%20,State%-12` -> columns. Raises SlurmCommandError for an unknown field."""
    chosen: list[AcctField] = []
    widths: dict[str, int] = {}
    for item in (i for i in spec.split(",") if i):
        name, percent, width_text = item.partition("%")
        field = find_field(name)
        if field is None:
            raise SlurmCommandError(f'sacct: error: Invalid field requested: "{name}"\n', 1)
        chosen.append(field)
        if percent:
            widths[field.name] = _atoi(width_text)
    return tuple(Column(f, widths.get(f.name, f.width)) for f in chosen)


def _atoi(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    body = text[1:] if text[:1] in "+-" else text
    digits = body[: len(body) - len(body.lstrip("0123456789"))]
    return sign * int(digits or 0)


def cell(value: str | None, column: Column) -> str:
    """One fixed-width cell with its trailing space, as print_fields_<kind> prints it."""
    return _cell_writer(column)(value)


def _cell_writer(column: Column) -> Callable[[str | None], str]:
    """cell() for one column, its width, side and kind worked out once: a listing calls it per job."""
    width = abs(column.width)
    pad = str.rjust if column.width >= 0 else str.ljust
    blank = pad("", width) + " "
    kind = column.field.kind

    def text(value: str | None) -> str:
        if value is None:
            return blank
        if len(value) > width:
            value = value[: width - 1] + "+" if width else ""
        return pad(value, width) + " "

    def date(value: str | None) -> str:
        return blank if value is None else pad(value[:width], width) + " "

    def number(value: str | None) -> str:  # numbers and durations overflow their column
        return blank if value is None else pad(value, width) + " "
    return text if kind == "str" else date if kind == "date" else number


def _line(texts: Sequence[str | None], layout: Layout) -> str:
    if layout.parsable:
        values = [t or "" for t in texts]
        end = layout.delimiter if layout.parsable == PARSABLE and values else ""
        return layout.delimiter.join(values) + end
    return "".join(cell(t, c) for t, c in zip(texts, layout.columns, strict=True))


def header_lines(layout: Layout) -> list[str]:
    names = [c.field.name for c in layout.columns]
    if layout.parsable:
        return [_line(names, layout)]
    heads = "".join((n[: abs(c.width)].rjust(c.width) if c.width >= 0 else n[: abs(c.width)].ljust(-c.width)) + " "
                    for n, c in zip(names, layout.columns, strict=True))
    return [heads, "".join("-" * abs(c.width) + " " for c in layout.columns)]


def row_line(job: Mapping, step: Mapping | None, layout: Layout, view: AcctView) -> str:
    return line_writer(layout, view)(job, step)


LineWriter = Callable[[Mapping, "Mapping | None"], str]


def line_writer(layout: Layout, view: AcctView) -> LineWriter:
    """row_line() for one layout and view, each column's getter and cell worked out once."""
    if layout.parsable:
        getters = [c.field.value for c in layout.columns]
        delimiter = layout.delimiter
        end = delimiter if layout.parsable == PARSABLE and getters else ""
        return lambda job, step: delimiter.join([get(job, step, view) or "" for get in getters]) + end
    cells = [(c.field.value, _cell_writer(c)) for c in layout.columns]
    return lambda job, step: "".join([write(get(job, step, view)) for get, write in cells])


def render(jobs: Iterable[Mapping], layout: Layout, view: AcctView) -> str:
    """sacct's stdout: header (unless -n), then each job and, unless -X, its steps."""
    head = "".join(line + "\n" for line in header_lines(layout)) if layout.header else ""
    write = line_writer(layout, view)
    return head + "".join(job_lines(job, write, layout.steps) for job in jobs)


def job_lines(job: Mapping, write: LineWriter, steps: bool) -> str:
    """A job's line and, with `steps` (no -X), its steps' lines, each ended by a newline."""
    text = write(job, None) + "\n"
    if steps:
        text += "".join(write(job, step) + "\n" for step in job.get("steps") or ())
    return text
