"""A listing's read of stored jobs on PostgreSQL: the spec's plain fields taken apart by the server.

A listing (Store.stream_listed_jobs) reads a page of jobs, encodes a few fields of each and lets it go. Decoding
each row's spec JSON in Python (1.1 kB, 55 keys) was the largest part of the controller's time for a day of
sacct over a million jobs (bench/sacct_million.py). Here PostgreSQL takes the spec and its request apart with
json_to_record: every field of JobSpec and Request whose type is str, int or bool comes as a typed column, and
psycopg converts those in C; the rest (argv, env, begin_time) and the job's slices, runs and extra come as one
JSON array a row. The page is chosen on ids alone and the wide rows are joined to it, so PostgreSQL sorts
narrow rows (sorting the whole rows of a window spilled 60 MB to disk per page).

A field absent from the stored JSON (written before the field existed) comes as NULL, read as JobSpec's default
(SpecView's class attribute): a field that may be None has None as its default (checked below), so a NULL
means the same either way."""
from __future__ import annotations

import json
import json.scanner
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import fields
from typing import Any, cast

from sqlalchemy import JSON, BigInteger, Boolean, Connection, Text, column, func, select, true, type_coerce
from sqlalchemy.sql import Select
from sqlalchemy.types import TypeEngine

from corral.core.model import Request
from corral.engine.records import Job, JobSpec
from corral.store import codec
from corral.store.errors import StoreError
from corral.store.schema import JOBS

# Python types PostgreSQL converts exactly, and how it names them. A float is not among them: a float field
# holding an int would come back as a float (1 -> 1.0), which the JSON encoder writes differently.
_SQL_TYPES: dict[type, TypeEngine[Any]] = {str: Text(), int: BigInteger(), bool: Boolean()}
# The JSON array of the parts left as JSON, in this order after the spec's own.
_JOB_DOCUMENTS = ("slices", "runs", "extra")


# The json module's scanner (in C), which json.loads calls after its checks; typeshed names its argument oddly.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))


def load_documents(data: str | bytes) -> Any:
    """A row's JSON array as PostgreSQL's json_build_array writes it (valid JSON, one value): the json module's
    scanner called at once, without json.loads' checks of encoding and trailing text (~3 µs a row)."""
    return _SCAN(data.decode() if isinstance(data, bytes) else data, 0)[0]


def _plain_type(annotation: Any) -> type | None:
    """str, int or bool for a field of that type (or that type or None); None for anything else."""
    options = [option for option in typing.get_args(annotation) if option is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(options) == 1:
        annotation = options[0]
    return annotation if annotation in _SQL_TYPES else None


class _Record:
    """The constructor fields of a dataclass split into the ones PostgreSQL reads as columns (`plain`, each with
    its SQL type) and the rest, read as JSON (`documents`)."""

    def __init__(self, cls: type) -> None:
        hints = typing.get_type_hints(cls)
        chosen = [f for f in fields(cls) if f.init]
        self.plain = tuple((f.name, kind) for f in chosen if (kind := _plain_type(hints[f.name])) is not None)
        self.documents = tuple(f.name for f in chosen if not _plain_type(hints[f.name]))
        for f in chosen:  # a NULL reads as the default: that must be what a stored null means too
            if type(None) in typing.get_args(hints[f.name]):
                assert f.default is None, f"{cls.__name__}.{f.name} may be None but defaults to {f.default!r}"

    def columns(self, relation: Any, prefix: str) -> list[Any]:
        return [relation.c[name].label(f"{prefix}{name}") for name, _ in self.plain]

    def definition(self, source: Any, name: str) -> Any:
        """json_to_record(source) AS name(field type, ...): every field of this record."""
        typed = [column(field_name, _SQL_TYPES[kind]) for field_name, kind in self.plain]
        typed += [column(field_name, JSON()) for field_name in self.documents]
        return func.json_to_record(source).table_valued(*typed).render_derived(name=name, with_types=True)


_SPEC = _Record(JobSpec)
_REQUEST = _Record(Request)
assert _REQUEST.documents == (), "every Request field is plain"
_SPEC_JSON = tuple(name for name in _SPEC.documents if name != "request")
# The job's own columns a listed row carries (its spec's come from the JSON).
_JOB_COLUMNS = ("id", "state", "reason", "submit_time", "start_time", "end_time", "estimated_start", "exit_code",
                "exit_signal", "final_state", "kill_deadline", "restart_count")


def listed_select(page: Select[Any]) -> Select[Any]:
    """The listed rows of the jobs whose ids `page` selects (one column, in order), in id order."""
    ids = page.subquery("page")
    spec = _SPEC.definition(JOBS.c.spec, "spec")
    request = _REQUEST.definition(spec.c.request, "request")
    documents = func.json_build_array(*(spec.c[name] for name in _SPEC_JSON),
                                      *(JOBS.c[name] for name in _JOB_DOCUMENTS))
    return (select(*(JOBS.c[name] for name in _JOB_COLUMNS), *_SPEC.columns(spec, "spec_"),
                   *_REQUEST.columns(request, "request_"), type_coerce(documents, JSON).label("documents"))
            .select_from(ids.join(JOBS, JOBS.c.id == ids.c.id).join(spec, true()).join(request, true()))
            .order_by(JOBS.c.id))


def _row_reader() -> Callable[[Any], Job]:
    spec_names = [name for name, _ in _SPEC.plain]
    request_names = [name for name, _ in _REQUEST.plain]
    spec_from = len(_JOB_COLUMNS)
    request_from = spec_from + len(spec_names)
    documents_at = request_from + len(request_names)

    def listed_job(row: Any) -> Job:
        spec = {name: value for name, value in zip(spec_names, row[spec_from:request_from], strict=True)
                if value is not None}
        request = row[request_from:documents_at]
        spec["request"] = Request(**{name: value for name, value in zip(request_names, request, strict=True)
                                     if value is not None})
        *spec_documents, slices, runs, extra = row[documents_at]
        for name, value in zip(_SPEC_JSON, spec_documents, strict=True):
            if value is not None:
                spec[name] = tuple(value) if name == "argv" else value
        return codec.listed_job_from_parts(row, codec.SpecView.of_fields(spec), slices, runs, extra)

    return listed_job


listed_job = _row_reader()


def streamed_jobs(connection: Connection, query: Select[Any], chunk_rows: int) -> Iterator[Job]:
    """`query` (listed_select's) on the connection's psycopg connection, in its transaction, streamed: PostgreSQL
    sends the rows `chunk_rows` at a time without waiting to be asked. psycopg's errors become StoreError, as
    SQLAlchemy's do (errors.translated)."""
    import psycopg  # only here: a store on SQLite never loads the driver
    from psycopg.rows import namedtuple_row
    from psycopg.types.json import set_json_loads

    compiled = query.compile(dialect=connection.dialect, compile_kwargs={"render_postcompile": True})
    driver = connection.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)  # the PostgreSQL dialect's driver
    try:
        with driver.cursor(row_factory=namedtuple_row) as cursor:
            set_json_loads(load_documents, cursor)
            for row in cursor.stream(compiled.string, compiled.params, size=chunk_rows):
                yield listed_job(row)
    except psycopg.Error as exc:
        raise StoreError(f"reading failed: {str(exc).strip()}") from exc
