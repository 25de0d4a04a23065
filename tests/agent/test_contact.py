"""The contact file the task leaders fence by (contact.py, decision 0017): a fresh contact thaws frozen
tasks, so none is written while the agent registers, until the registration's reply has been carried out."""
from __future__ import annotations

import json
from pathlib import Path

from corral.agent.contact import Contact


def written(path: Path) -> float | None:
    return json.loads(path.read_text())["contact"] if path.exists() else None


def test_nothing_is_written_before_the_first_registration(tmp_path: Path) -> None:
    contact = Contact(tmp_path / "contact")
    contact.made(100.0)
    assert written(tmp_path / "contact") is None, "an earlier agent's contact (and its fencing) stands"
    contact.registered(20.0, 101.0)
    assert written(tmp_path / "contact") == 101.0
    assert json.loads((tmp_path / "contact").read_text())["fence_after_s"] == 20.0


def test_no_answer_moves_the_contact_while_the_agent_registers_again(tmp_path: Path) -> None:
    contact = Contact(tmp_path / "contact")
    contact.registered(20.0, 100.0)
    contact.registering()  # a 409: the controller may have given this node's jobs away
    contact.made(150.0)  # a reply to a request sent meanwhile (another loop's)
    assert written(tmp_path / "contact") == 100.0, "no thaw before the registration's kills are done"
    contact.registered(20.0, 151.0)  # the reply carried out
    assert written(tmp_path / "contact") == 151.0
    contact.made(160.0)
    assert written(tmp_path / "contact") == 160.0


def test_an_older_answer_never_moves_the_contact_back(tmp_path: Path) -> None:
    contact = Contact(tmp_path / "contact")
    contact.registered(20.0, 100.0)
    contact.made(110.0)
    contact.made(105.0)
    assert written(tmp_path / "contact") == 110.0
