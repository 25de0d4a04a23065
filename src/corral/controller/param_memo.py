"""FastAPI's per-request reading of a route's parameters, with what depends only on the route worked out once.

For every query, header and path parameter of every request, FastAPI 0.165 (`fastapi.dependencies.utils`)
asks again what the parameter's declaration says: whether its annotation is a sequence (typing
introspection: get_origin, get_args, issubclass over six sequence types), whether it is a model of several
parameters, and which names it may arrive under. None of that changes after a route is declared; on
GET /jobs (squeue's request, 12 query parameters) it was about a third of the request's CPU
(bench/http_cost.py). `install()` puts memoizing wrappers in their place in that module: each answers
exactly what the original answers (it is called once per annotation or field and the answer kept), so
validation, error messages and the OpenAPI document are FastAPI's own. A FastAPI that no longer has these
functions fails `install()` at the controller's start, not silently.

Memoized by identity for fields (they live as long as the app that declared them) and by value for
annotations (types are hashable; an unhashable one is asked every time)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fastapi.dependencies.utils as dependency_utils

_FIELD_FUNCTIONS = ("_get_param_model", "_is_json_field")
_ANNOTATION_FUNCTIONS = ("field_annotation_is_sequence",)
_MEMO_MARK = "__corral_memo__"


def _by_field(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    answers: dict[int, tuple[Any, Any]] = {}  # id(field) -> (field, answer): the field kept, so its id stays its own

    def memoized(field: Any) -> Any:
        known = answers.get(id(field))
        if known is not None and known[0] is field:
            return known[1]
        answer = original(field)
        answers[id(field)] = (field, answer)
        return answer

    setattr(memoized, _MEMO_MARK, original)
    return memoized


def _by_annotation(original: Callable[[Any], bool]) -> Callable[[Any], bool]:
    answers: dict[Any, bool] = {}

    def memoized(annotation: Any) -> bool:
        try:
            return answers[annotation]
        except KeyError:
            answer = answers[annotation] = original(annotation)
            return answer
        except TypeError:  # unhashable: not kept
            return original(annotation)

    setattr(memoized, _MEMO_MARK, original)
    return memoized


def _get_param_aliases_memo(original: Callable[..., list[tuple[str, str]]]) -> Callable[..., list[tuple[str, str]]]:
    answers: dict[tuple[int, bool], tuple[Any, list[tuple[str, str]]]] = {}

    def memoized(field: Any, *, convert_underscores: bool = False) -> list[tuple[str, str]]:
        key = (id(field), convert_underscores)
        known = answers.get(key)
        if known is None or known[0] is not field:
            known = answers[key] = (field, original(field, convert_underscores=convert_underscores))
        return list(known[1])  # a copy: callers may not change the kept answer

    setattr(memoized, _MEMO_MARK, original)
    return memoized


def install() -> None:
    """Idempotent. Raises RuntimeError if FastAPI no longer has a function this replaces."""
    missing = [name for name in (*_FIELD_FUNCTIONS, *_ANNOTATION_FUNCTIONS, "_get_param_aliases")
               if not callable(getattr(dependency_utils, name, None))]
    if missing:
        raise RuntimeError(f"fastapi.dependencies.utils has no {', '.join(missing)}: controller/param_memo.py "
                           "must follow the FastAPI in requirements.lock")
    if installed():
        return
    for name in _FIELD_FUNCTIONS:
        setattr(dependency_utils, name, _by_field(getattr(dependency_utils, name)))
    for name in _ANNOTATION_FUNCTIONS:
        setattr(dependency_utils, name, _by_annotation(getattr(dependency_utils, name)))
    dependency_utils._get_param_aliases = _get_param_aliases_memo(dependency_utils._get_param_aliases)


def installed() -> bool:
    return hasattr(dependency_utils._get_param_model, _MEMO_MARK)


def original(name: str) -> Callable[..., Any]:
    """The FastAPI function that `name` memoizes (for tests that compare answers)."""
    return getattr(getattr(dependency_utils, name), _MEMO_MARK)
