"""Both clients (the Slurm commands' and the corral CLI's) ask a real controller over HTTP for rows of
fields and get the records the whole list holds, page after page."""
from __future__ import annotations

import pytest

from corral.cli.client import Client
from corral.controller.app import create_app
from corral.controller.restore import restore_engine
from corral.controller.service import ControllerService
from corral.slurm.common import http
from corral.slurm.common.http import JOB_LINE_FIELDS, Controller
from corral.store import Store
from tests.cli.standin import ServerThread
from tests.controller.conftest import CONFIG, LIVE, SECRET, T0, node
from tests.controller.test_job_lists import MIXED


@pytest.fixture
def controller_url(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    store.save(jobs=list(MIXED), nodes=[node("n1")])
    service = ControllerService(restore_engine(CONFIG, LIVE, store, T0 + 100), store, clock=lambda: T0 + 100)
    with ServerThread(create_app(service, SECRET)) as server:
        yield server.url


def _only(records: list[dict], fields: tuple[str, ...]) -> list[dict]:
    return [{name: record[name] for name in fields} for record in records]


@pytest.mark.parametrize("combine", [False, True])
def test_the_slurm_commands_client_turns_rows_into_records(controller_url, monkeypatch, combine) -> None:
    monkeypatch.setattr(http, "PAGE_JOBS", 3)  # several pages
    controller = Controller(controller_url, SECRET)
    whole = controller.jobs(include_finished=True, combine_arrays=combine)
    assert len(whole) > 3
    rows = controller.jobs(include_finished=True, combine_arrays=combine, fields=JOB_LINE_FIELDS)
    assert rows == _only(whole, JOB_LINE_FIELDS)
    since = controller.accounting(since=T0, fields=("id", "state"))
    assert since == _only(controller.accounting(since=T0), ("id", "state"))


def test_the_cli_client_turns_rows_into_records(controller_url) -> None:
    with Client(controller_url, SECRET) as client:
        whole = client.jobs(combine_arrays=True)
        assert client.jobs(combine_arrays=True, fields=JOB_LINE_FIELDS) == _only(whole, JOB_LINE_FIELDS)
        each = client.jobs()
        assert client.jobs(user="bob", fields=("user", "id")) == [
            {"user": "bob", "id": j["id"]} for j in each if j["user"] == "bob"]
