import io

import pytest

from corral.cli.output import print_table


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_plain_table_when_piped(capsys):
    print_table(("ID", "STATE"), [("1", "RUNNING")], state_column=1)
    assert capsys.readouterr().out == "ID  STATE\n1   RUNNING\n"


def test_terminal_table_is_styled_but_aligned(monkeypatch):
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stdout", terminal)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    print_table(("ID", "STATE", "NAME"), [("1", "RUNNING", "a"), ("22", "FAILED", "b")], state_column=1)
    text = terminal.getvalue()
    assert "\x1b[" in text  # styled
    plain = _strip_ansi(text).splitlines()
    assert plain == ["ID  STATE    NAME", "1   RUNNING  a", "22  FAILED   b"]


def _strip_ansi(text):
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@pytest.mark.parametrize(
    ("rows", "header"), [([], "ID  STATE  NAME"), ([("1", "PENDING", "x")], "ID  STATE    NAME")]
)
def test_header_widens_with_rows(capsys, rows, header):
    print_table(("ID", "STATE", "NAME"), rows)
    assert capsys.readouterr().out.splitlines()[0] == header
