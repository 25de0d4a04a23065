"""controller/param_memo.py: FastAPI's per-request questions about a route's parameters, answered once.
Every answer the memo gives, for every parameter of every route of the app, is the one FastAPI's own
function gives; and the app still refuses bad parameters with FastAPI's errors."""
from __future__ import annotations

import fastapi.dependencies.utils as dependency_utils
from fastapi.routing import APIRoute

from corral.controller import param_memo
from tests.controller.conftest import job, open_api


def every_parameter(app):
    for route in app.router.routes:
        if isinstance(route, APIRoute):
            pending = [route.dependant]
            while pending:  # the route's own parameters and those of its dependencies
                dependant = pending.pop()
                pending.extend(dependant.dependencies)
                yield from (*dependant.path_params, *dependant.query_params, *dependant.header_params,
                            *dependant.cookie_params, *dependant.body_params)


def test_the_memo_answers_as_fastapi_does(tmp_path) -> None:
    app = open_api(tmp_path, []).app
    assert param_memo.installed()
    fields = list(every_parameter(app))
    assert len(fields) > 50
    for _ in range(2):  # the second time from the memo
        for field in fields:
            for name in ("_get_param_model", "_is_json_field"):
                assert getattr(dependency_utils, name)(field) == param_memo.original(name)(field), (name, field)
            annotation = field.field_info.annotation
            assert (dependency_utils.field_annotation_is_sequence(annotation)
                    == param_memo.original("field_annotation_is_sequence")(annotation))
            for convert in (False, True):
                assert (dependency_utils._get_param_aliases(field, convert_underscores=convert)
                        == param_memo.original("_get_param_aliases")(field, convert_underscores=convert))


def test_installing_twice_wraps_once(tmp_path) -> None:
    open_api(tmp_path, [])
    before = dependency_utils._get_param_model
    param_memo.install()
    assert dependency_utils._get_param_model is before


def test_parameters_are_still_read_and_refused_as_before(tmp_path) -> None:
    api = open_api(tmp_path, [job(1), job(2, user="bob")])
    assert [j["id"] for j in api.get("/jobs", params={"user": "bob"}).json()] == [2]
    assert [j["id"] for j in api.get("/jobs", params={"limit": "1"}).json()] == [1]
    refused = api.get("/jobs", params={"limit": "many"})
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith("limit: Input should be a valid integer")
