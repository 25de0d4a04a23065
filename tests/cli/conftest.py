import pytest
from typer.testing import CliRunner

from corral.cli.main import app

from .standin import SECRET, ServerThread, StandinState, make_app


@pytest.fixture(scope="session")
def standin_server():
    state = StandinState()
    with ServerThread(make_app(state)) as server:
        server.state = state
        yield server


@pytest.fixture
def standin(standin_server, monkeypatch, tmp_path):
    """The stand-in controller, fresh data, and an environment that points the CLI at it."""
    standin_server.state.reset()
    clean_environment(monkeypatch, tmp_path)
    monkeypatch.setenv("CORRAL_URL", standin_server.url)
    monkeypatch.setenv("CORRAL_SECRET", SECRET)
    return standin_server


def clean_environment(monkeypatch, tmp_path):
    for name in ("CORRAL_URL", "CORRAL_SECRET", "CORRAL_SECRET_FILE", "CORRAL_TOKEN", "FORCE_COLOR",
                 "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    # Never the host's /etc/corral/cluster.json: neither read nor written by a test.
    monkeypatch.setenv("CORRAL_SYSTEM_CLUSTER_FILE", str(tmp_path / "etc" / "cluster.json"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def isolated(monkeypatch, tmp_path):
    """No cluster configured at all: only tmp dirs."""
    clean_environment(monkeypatch, tmp_path)
    return tmp_path


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args, **kwargs):
        return runner.invoke(app, list(args), **kwargs)

    return invoke


@pytest.fixture
def live(monkeypatch, tmp_path):
    """The real controller (tests/controller/live.py), fresh, with the CLI pointed at it."""
    from tests.controller.live import SECRET, live_controller

    clean_environment(monkeypatch, tmp_path)
    with live_controller(tmp_path) as controller:
        monkeypatch.setenv("CORRAL_URL", controller.url)
        monkeypatch.setenv("CORRAL_SECRET", SECRET)
        yield controller
