"""squeue's output formats: `-o "%.18i %.9P ..."` (see formatspec.py: `-` is not a flag squeue
knows, so `%-4D` prints back literally with an error), `-O "JobID,Name:20"` (fields
`name[:[.]width][suffix]`, 20 wide by default, with no separator of their own), and the lines."""
from __future__ import annotations

from _collections_abc import Iterable, Mapping

from corral.slurm.common import formatspec, timefmt
from corral.slurm.common.formatspec import Column, Format, parse_percent_format, print_str
from corral.slurm.squeue.fields import LETTERS, LONG_NAMES, View

DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"
LONG_FIELD_DEFAULT_WIDTH = 20
__all__ = ["DEFAULT_FORMAT", "LONG_FORMAT", "START_FORMAT", "Column", "Format", "header_line", "job_line",
           "parse_format", "parse_long_format", "print_str", "render"]


def parse_format(spec: str) -> Format:
    """A `-o`/`--format`/SQUEUE_FORMAT specification."""
    return parse_percent_format(spec, LETTERS, _invalid)


def _invalid(letter: str) -> str:
    return f"squeue: error: Invalid job format specification: {letter}\n"


def parse_long_format(spec: str) -> Format:
    """A `-O`/`--Format`/SQUEUE_FORMAT2 specification: comma-separated `name[:[.]width][suffix]`."""
    columns: list[Column] = []
    errors: list[str] = []
    for token in (t for t in spec.split(",") if t):
        name, colon, rest = token.partition(":")
        right, width, suffix = False, LONG_FIELD_DEFAULT_WIDTH, ""
        if colon:
            right = rest.startswith(".")
            rest = rest[int(right):]
            digits = len(rest) - len(rest.lstrip("0123456789"))
            width, suffix = int(rest[:digits] or 0), rest[digits:]
        field = LONG_NAMES.get(name.lower())
        if field is None:
            errors.append(f"squeue: error: Invalid job format specification: {name}\n")
        columns.append(Column(field, width, right, suffix))
    return Format(tuple(columns), tuple(errors))


def header_line(fmt: Format) -> str:
    return formatspec.header_line(fmt)


def job_line(job: Mapping, fmt: Format, view: View) -> str:
    return formatspec.record_line(job, fmt, view)


def render(jobs: Iterable[Mapping], fmt: Format, view: View, *, header: bool = True,
           long_banner: bool = False) -> str:
    """squeue's stdout for jobs already filtered and sorted: optional ctime banner (-l), header, rows."""
    lines = [timefmt.ctime(view.now)] if long_banner else []
    if header:
        lines.append(header_line(fmt))
    lines.extend(formatspec.record_lines(list(jobs), fmt, view))
    return "".join(line + "\n" for line in lines)
