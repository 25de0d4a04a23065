"""Slurm's print_fields (src/common/print_fields.c, 22.05), as sshare, sreport and sacctmgr print their
tables: a header of names cut to the column's width, a line of dashes, then one line per row; each
cell followed by one space. A negative width is left-justified; a text longer than its column ends
in `+`. Parsable (-p/-P): cells joined by `|`, -p with a closing `|`, -P without."""
from __future__ import annotations

from _collections_abc import Sequence

from corral.slurm.common.record import Record

NOT_PARSABLE, PARSABLE_ENDING, PARSABLE_NO_ENDING = 0, 1, 2


class PrintField(Record):
    name: str
    width: int  # negative: left-justified


def cell(text: str | None, width: int, parsable: int = NOT_PARSABLE, cut: bool = True) -> str:
    """One cell without its separator. `cut=False`: numbers, which C prints whole (%*d)."""
    value = text or ""
    if parsable:
        return value
    size = abs(width)
    if cut and len(value) > size:
        value = value[:size - 1] + "+"
    return value.ljust(size) if width < 0 else value.rjust(size)


def line(cells: Sequence[str], parsable: int = NOT_PARSABLE) -> str:
    if parsable == PARSABLE_NO_ENDING:
        return "|".join(cells) + "\n"
    if parsable == PARSABLE_ENDING:
        return "".join(c + "|" for c in cells) + "\n"
    return "".join(c + " " for c in cells) + "\n"


def header(fields: Sequence[PrintField], parsable: int = NOT_PARSABLE) -> str:
    """print_fields_header: the names (cut to width), then the dashes, unless parsable."""
    if parsable:
        return line([f.name for f in fields], parsable)
    names = line([_cut_exact(f.name, f.width) for f in fields])
    return names + line(["-" * abs(f.width) for f in fields])


def _cut_exact(name: str, width: int) -> str:
    """Header names are printed with %*.*s: cut without a `+`."""
    size = abs(width)
    return name[:size].ljust(size) if width < 0 else name[:size].rjust(size)


def double(value: float | None) -> str:
    """print_fields_double: %f; None (Slurm's NO_VAL) prints empty."""
    return "" if value is None else f"{value:f}"
