"""The lean `corral submit` (corral.cli.lean_submit): for a table of argument lists, good and bad, the same output,
errors, exit status and job body as the Typer command; a request is never sent twice; and it loads neither
Typer, click nor httpx."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from corral.cli import lean_commands

SCRIPT = "#!/bin/sh\n#SBATCH -t 5\n#SBATCH -J from-script\ntrue\n"
BAD_DIRECTIVE = "#!/bin/sh\n#SBATCH --nodes=zero\ntrue\n"


@pytest.fixture
def scripts(tmp_path, monkeypatch):
    (tmp_path / "job.sh").write_text(SCRIPT)
    (tmp_path / "bad.sh").write_text(BAD_DIRECTIVE)
    (tmp_path / "latin1.sh").write_bytes(b"#!/bin/sh\necho \xe9\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("argv", [
    ["--wrap", "true"],
    ["--parsable", "--wrap", "true"],
    ["--json", "--wrap", "true"],
    ["-N2", "--gres=gpu:2", "--", "python", "-c", "print(1)", "--nodes", "9"],
    ["-t", "30", "--partition=gpu", "job.sh", "arg1"],
    ["job.sh"],
    ["--array=0-4:2%2", "--wrap", "true"],
    ["--parsable", "-a", "1,3", "--wrap", "true"],
    ["--requeue=expedite", "-H", "--wrap", "true"],
    ["--url", "{url}", "--wrap", "true"],
    ["--help"],
    # bad input: refused before anything is sent
    ["--bogus", "--wrap", "true"],
    ["--nodes"],
    ["--wrap", "true", "job.sh"],
    ["--"],
    ["missing.sh"],
    ["latin1.sh"],
    ["bad.sh"],
    ["-t", "forever", "--wrap", "true"],
    ["--gres=gpu:1,mps:50", "--", "python", "train.py"],
    # refused by the controller
    ["--partition=nosuch", "--wrap", "true"],
    ["--gpus-per-node=8", "--wrap", "true"],
])
def test_lean_submit_is_the_typer_command(standin, cli, capsys, scripts, argv):
    argv = ["submit", *(arg.replace("{url}", standin.url) for arg in argv)]
    status = lean_commands.run(argv)
    lean = capsys.readouterr()
    lean_sent = list(standin.state.submissions)
    standin.state.reset()
    full = cli(*argv)
    assert status == full.exit_code, (lean, full.output)
    assert (lean.out, lean.err) == (full.stdout, full.stderr)
    assert _without_volatile(lean_sent) == _without_volatile(standin.state.submissions)


def _without_volatile(bodies: list[dict]) -> list[dict]:
    """The environment differs only by what CliRunner sets; everything else is compared."""
    return [{key: value for key, value in body.items() if key != "environment"} for body in bodies]


def test_a_refusal_is_reported_in_the_typer_commands_words(standin, cli, capsys, monkeypatch, scripts):
    monkeypatch.setenv("CORRAL_SECRET", "wrong")
    status = lean_commands.run(["submit", "--wrap", "true"])
    lean = capsys.readouterr()
    full = cli("submit", "--wrap", "true")
    assert status == 1 == full.exit_code
    assert lean.err == full.stderr and "the controller refused the request" in lean.err
    assert standin.state.submissions == []


def test_an_unreachable_controller_is_reported_in_the_typer_commands_words(isolated, cli, capsys, monkeypatch):
    monkeypatch.setenv("CORRAL_URL", "http://127.0.0.1:9")  # discard: nothing listens
    status = lean_commands.run(["submit", "--wrap", "true"])
    lean = capsys.readouterr()
    full = cli("submit", "--wrap", "true")
    assert status == 1 == full.exit_code
    assert lean.err == full.stderr == ("corral: error: cannot reach the controller at http://127.0.0.1:9 "
                                       "(is 'corral up' running?)\n")


def test_a_setting_it_cannot_use_is_handed_on_before_reading_anything(isolated, capsys, monkeypatch):
    monkeypatch.setenv("CORRAL_URL", "http://host:notaport")
    assert lean_commands.run(["submit", "--wrap", "true"]) is None
    assert capsys.readouterr() == ("", "")


def test_a_submission_is_sent_once_even_when_the_answer_is_lost(isolated, capsys, monkeypatch):
    """A controller that takes the request and closes without answering: reported, never sent again."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    requests: list[bytes] = []

    def take_and_close() -> None:
        server.settimeout(10)
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                requests.append(conn.recv(65536))

    thread = threading.Thread(target=take_and_close, daemon=True)
    thread.start()
    monkeypatch.setenv("CORRAL_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
    try:
        assert lean_commands.run(["submit", "--wrap", "true"]) == 1
    finally:
        server.close()
        thread.join(timeout=15)
    err = capsys.readouterr().err
    assert "the job may have been submitted: check with corral queue" in err
    assert len(requests) == 1 and requests[0].startswith(b"POST /api/v1/jobs ")


HEAVY = ("typer", "click", "httpx", "rich", "pydantic")


def test_the_lean_submit_loads_no_typer_click_or_httpx(standin):
    code = ("import sys\nfrom corral.cli.main import main\nsys.argv = ['corral', 'submit', '--wrap', 'true']\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    status = exc.code\n"
            f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
            "print('HEAVY', heavy, status)")
    env = {**os.environ, "CORRAL_URL": standin.url, "CORRAL_COMMAND_HELPER": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    submitted, heavy = out.splitlines()
    assert submitted.startswith("Submitted job ") and submitted.removeprefix("Submitted job ").isdigit()
    assert heavy == "HEAVY [] 0"
