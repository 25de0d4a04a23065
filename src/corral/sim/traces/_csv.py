"""Shared streaming CSV plumbing for the trace readers: gzip by suffix, header checks, and field
conversions whose errors name the file and line."""
from __future__ import annotations

import csv
import gzip
import io
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO


def _default_traces_dir() -> Path:
    """CORRAL_TRACES_DIR, else the `shared/traces` folder beside this checkout (as CI lays it out),
    else /work/shared/traces."""
    if os.environ.get("CORRAL_TRACES_DIR"):
        return Path(os.environ["CORRAL_TRACES_DIR"])
    beside_checkout = Path(__file__).resolve().parents[4].parent / "shared" / "traces"
    return beside_checkout if beside_checkout.is_dir() else Path("/work/shared/traces")


# Where the shared traces live; tests and the CLI use it for defaults.
TRACES_DIR = _default_traces_dir()


class TraceFormatError(ValueError):
    """A trace file that cannot be read as its format says: the message starts with `path:line:`."""

    def __init__(self, path: str | os.PathLike[str], line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


@contextmanager
def open_text(path: str | os.PathLike[str]) -> Iterator[TextIO]:
    """Open a text file, decompressing `.gz` on the fly (the traces are large; never load them whole)."""
    p = Path(path)
    raw = gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")
    text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
    try:
        yield text
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        # A truncated gzip or a binary file surfaces mid-iteration: say which file.
        raise TraceFormatError(p, None, f"cannot read: {exc}") from exc
    finally:
        text.close()


class Row:
    """One CSV record with its location, and typed accessors that fail with `path:line:`."""

    __slots__ = ("path", "line", "values")

    def __init__(self, path: str, line: int, values: dict[str, str]) -> None:
        self.path, self.line, self.values = path, line, values

    def error(self, message: str) -> TraceFormatError:
        return TraceFormatError(self.path, self.line, message)

    def text(self, column: str) -> str:
        return self.values[column].strip()

    def integer(self, column: str, *, minimum: int | None = 0) -> int:
        raw = self.text(column)
        try:
            value = int(raw)
        except ValueError:
            try:
                as_float = float(raw)  # "3.0" from float-formatting writers
            except ValueError:
                raise self.error(f"column {column!r}: {raw!r} is not an integer") from None
            if not as_float.is_integer():
                raise self.error(f"column {column!r}: {raw!r} is not an integer") from None
            value = int(as_float)
        if minimum is not None and value < minimum:
            raise self.error(f"column {column!r}: {value} < {minimum}")
        return value

    def number(self, column: str, *, minimum: float | None = 0.0) -> float:
        raw = self.text(column)
        try:
            value = float(raw)
        except ValueError:
            raise self.error(f"column {column!r}: {raw!r} is not a number") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise self.error(f"column {column!r}: {raw!r} is not a finite number")
        if minimum is not None and value < minimum:
            raise self.error(f"column {column!r}: {value} < {minimum}")
        return value


def iter_rows(path: str | os.PathLike[str], required: Sequence[str], *, delimiter: str = ",",
              comment: str | None = None) -> Iterator[Row]:
    """Yield the records of a CSV file with a header line, checking that `required` columns exist
    and that every record has as many fields as the header. Lines are 1-based file lines."""
    with open_text(path) as f:
        lines = _skip_comments(f, comment) if comment else ((i, ln) for i, ln in enumerate(f, 1))
        yield from _rows(str(path), lines, required, delimiter)


def _skip_comments(f: TextIO, comment: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(f, 1):
        if not line.startswith(comment):
            yield number, line


def _rows(path: str, lines: Iterator[tuple[int, str]], required: Sequence[str],
          delimiter: str) -> Iterator[Row]:
    first = next(lines, None)
    if first is None:
        raise TraceFormatError(path, 1, "empty file (expected a header line)")
    header_line, header_text = first
    header = [h.strip() for h in next(csv.reader([header_text], delimiter=delimiter))]
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceFormatError(path, header_line, f"header lacks column(s) {', '.join(missing)}; "
                                                  f"found {', '.join(header)}")
    for number, text in lines:
        if not text.strip():
            continue
        fields = next(csv.reader([text], delimiter=delimiter))
        if len(fields) != len(header):
            raise TraceFormatError(path, number, f"{len(fields)} fields, header has {len(header)}")
        yield Row(path, number, dict(zip(header, fields, strict=True)))
