"""The lean `corral queue`, `corral show` and `corral cancel` (corral.cli.lean_commands): the same bytes as the Typer
commands they stand in for, against the same stand-in controller; everything they do not handle is handed
to the Typer app untouched; and they load neither Typer, click nor httpx."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from corral.cli import lean_commands, render
from corral.cli.client import PAGE_JOBS

from .test_commands import add_array_tasks

FIXED_NOW = 1_800_000_000.0  # both paths render TIME and est. start from the same instant


@pytest.fixture
def frozen_clock(monkeypatch):
    monkeypatch.setattr(time, "time", lambda: FIXED_NOW)


@pytest.mark.parametrize("argv", [
    ["queue"],
    ["queue", "--all"],
    ["queue", "-a", "-l"],
    ["queue", "--long"],
    ["queue", "--json"],
    ["queue", "--all", "--json"],
    ["queue", "-u", "bob"],
    ["queue", "--user=bob", "-t", "failed,pending", "--all"],
    ["queue", "-tpending"],
    ["queue", "--states", "COMPLETED"],  # nothing matches: the empty-queue sentence
    ["queue", "--all", "--user", "nobody"],
    ["show", "1"],
    ["show", "--json", "2"],
    ["show", "20"],  # an array's id: every task
    ["show", "20", "--json"],
    ["show", "20_1"],
    ["show", "20_1", "--json"],
])
def test_lean_output_is_the_typer_commands_byte_for_byte(standin, cli, capsys, frozen_clock, argv):
    add_array_tasks(standin.state)
    status = lean_commands.run(argv)
    lean = capsys.readouterr()
    full = cli(*argv)
    assert status == 0 == full.exit_code, full.output
    assert lean.out == full.stdout
    assert lean.err == "" == full.stderr


@pytest.mark.parametrize("argv", [
    ["cancel", "1", "2"],
    ["cancel", "99", "2"],  # an unknown id: an error, the rest cancelled, status 1
    ["cancel", "3"],  # already ended: a note, status 0
    ["cancel", "20"],  # an array: every task, one already ended
    ["cancel", "20_[1-2]"],
    ["cancel", "--url", "{url}", "2"],
])
def test_lean_cancel_does_what_the_typer_command_does(standin, cli, capsys, argv):
    argv = [arg.replace("{url}", standin.url) for arg in argv]
    add_array_tasks(standin.state)
    standin.state.jobs[22]["state"] = "COMPLETED"
    status = lean_commands.run(argv)
    lean, lean_states = capsys.readouterr(), {i: j["state"] for i, j in standin.state.jobs.items()}
    standin.state.reset()
    add_array_tasks(standin.state)
    standin.state.jobs[22]["state"] = "COMPLETED"
    full = cli(*argv)
    assert status == full.exit_code
    assert (lean.out, lean.err) == (full.stdout, full.stderr)
    assert lean_states == {i: j["state"] for i, j in standin.state.jobs.items()}


def test_lean_cancel_sends_nothing_before_every_id_is_known(standin, capsys, monkeypatch):
    monkeypatch.setenv("CORRAL_SECRET", "wrong")  # every request refused: handed on, nothing cancelled
    assert lean_commands.run(["cancel", "1", "2"]) is None
    assert capsys.readouterr() == ("", "")
    assert {standin.state.jobs[1]["state"], standin.state.jobs[2]["state"]} == {"RUNNING", "PENDING"}


def test_lean_cancel_looks_up_once_and_sends_each_cancel_once(standin, capsys):
    add_array_tasks(standin.state)
    standin.state.jobs[20]["state"] = "COMPLETED"
    before = len(standin.state.queries)
    assert lean_commands.run(["cancel", "20"]) == 0  # 20 ended (409), 21 and 22 cancelled
    out, err = capsys.readouterr()
    assert out.splitlines() == ["Cancelled job 20_1 (CANCELLED)", "Cancelled job 20_2 (CANCELLED)"]
    assert err == "corral: 1 of the 3 jobs of 20 had already ended\n"
    assert standin.state.queries[before:] == [  # one lookup, then each cancel once
        ("/jobs", {"all": "true", "ids": "20", "limit": str(PAGE_JOBS)}), ("/jobs/20/cancel", {}),
        ("/jobs/21/cancel", {}), ("/jobs/22/cancel", {})]


def test_lean_queue_sends_the_typer_commands_query(standin, cli):
    assert lean_commands.run(["queue", "--all", "--user", "bob", "-t", "failed,pending"]) == 0
    lean_query = standin.state.queries[-1]
    cli("queue", "--all", "--user", "bob", "-t", "failed,pending")
    assert lean_query == standin.state.queries[-1] == (
        "/jobs", {"all": "true", "user": "bob", "states": "FAILED,PENDING", "combine_arrays": "true",
                  "fields": ",".join(render.QUEUE_FIELDS), "columns": "true", "limit": str(PAGE_JOBS)})


@pytest.mark.parametrize("argv", [
    [],
    ["nodes"],
    ["queue", "--help"],
    ["queue", "--watch"],
    ["queue", "-al"],  # clustered flags: click's rules
    ["queue", "--json=yes"],
    ["queue", "--user"],  # a missing value: click's error
    ["queue", "extra"],
    ["queue", "--bogus"],
    ["show"],
    ["show", "1", "2"],
    ["show", "abc"],  # not a job id: click's usage error
    ["show", "99"],  # no such job: the Typer command's message
    ["cancel"],
    ["cancel", "abc"],  # not a job id: click's usage error, nothing sent
    ["cancel", "-x", "1"],
])
def test_lean_commands_hand_on_what_they_do_not_handle(standin, capsys, argv):
    before = len(standin.state.queries)
    assert lean_commands.run(argv) is None
    assert capsys.readouterr().out == ""
    if argv != ["show", "99"]:  # nothing asked of the controller before the form was known to be handled
        assert len(standin.state.queries) == before


def test_a_failed_read_is_handed_on_and_the_typer_command_reports_it(standin, cli, capsys, monkeypatch):
    monkeypatch.setenv("CORRAL_SECRET", "wrong")
    assert lean_commands.run(["queue"]) is None
    assert capsys.readouterr() == ("", "")
    assert "the controller refused the request" in cli("queue").stderr


def test_an_unreachable_controller_is_handed_on(isolated, capsys, monkeypatch):
    monkeypatch.setenv("CORRAL_URL", "http://127.0.0.1:9")  # discard: nothing listens
    assert lean_commands.run(["queue"]) is None
    assert lean_commands.run(["show", "1"]) is None
    assert capsys.readouterr() == ("", "")


HEAVY = ("typer", "click", "httpx", "rich", "pydantic", "typing", "re")


@pytest.mark.parametrize("argv", [["queue"], ["show", "1"], ["cancel", "2"]])
def test_the_lean_commands_load_no_typer_click_httpx_typing_or_re(standin, argv):
    code = (f"import sys\nfrom corral.cli.main import main\nsys.argv = ['corral', *{argv!r}]\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    status = exc.code\n"
            f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
            "print('HEAVY', heavy, status)")
    env = {**os.environ, "CORRAL_URL": standin.url}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "HEAVY [] 0"
    assert len(out.splitlines()) > 1  # it printed what the command prints


def test_corral_main_still_runs_the_typer_app_for_other_commands(standin):
    env = {**os.environ, "CORRAL_URL": standin.url}
    proc = subprocess.run([sys.executable, "-m", "corral.cli.main", "queue", "--help"], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0
    assert "--watch" in proc.stdout
