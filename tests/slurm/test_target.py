"""The Slurm commands find the controller and the user exactly as the `corral` CLI does
(corral.slurm.common.target repeats corral.cli.config without its imports)."""
from __future__ import annotations

import json

import pytest

from corral.cli import config
from corral.cli.errors import ConfigError
from corral.slurm.common import target
from corral.slurm.sbatch.export import job_environment


def both(env: dict[str, str]):
    """(cli's answer, slurm's answer), each (url, secret, source) or the error message."""
    try:
        cli = config.resolve_target(None, env)
        cli_answer = (cli.url, cli.secret, cli.source)
    except ConfigError as exc:
        cli_answer = str(exc)
    try:
        ours = target.resolve_target(env)
        our_answer = (ours.url, ours.secret, ours.source)
    except target.TargetError as exc:
        our_answer = str(exc)
    return cli_answer, our_answer


@pytest.fixture
def home(tmp_path):
    (tmp_path / "secret").write_text("from-file\n")
    (tmp_path / "empty").write_text("")
    return tmp_path


def write_cluster(directory, url: str, secret_file) -> None:
    (directory / "corral").mkdir(parents=True, exist_ok=True)
    (directory / "corral" / "cluster.json").write_text(json.dumps({"url": url, "secret_file": str(secret_file)}))


@pytest.mark.parametrize("case", ["nothing", "url+secret", "url+secret file", "cluster.json", "xdg cluster.json",
                                  "cluster.json for another url", "empty secret file", "missing secret file",
                                  "broken cluster.json", "cluster.json without url"])
def test_resolution_agrees_with_the_cli(home, case):
    env = {"HOME": str(home)}
    if case == "url+secret":
        env |= {"CORRAL_URL": "ctl:7000/", "CORRAL_SECRET": " s \n"}
    elif case == "url+secret file":
        env |= {"CORRAL_URL": "https://ctl", "CORRAL_SECRET_FILE": str(home / "secret")}
    elif case in ("cluster.json", "cluster.json for another url"):
        write_cluster(home / ".config", "http://10.0.0.1:6817", home / "secret")
        if case == "cluster.json for another url":
            env["CORRAL_URL"] = "http://10.0.0.2:6817"
    elif case == "xdg cluster.json":
        write_cluster(home / "xdg", "10.0.0.3:1", home / "secret")
        env["XDG_CONFIG_HOME"] = str(home / "xdg")
    elif case == "empty secret file":
        env |= {"CORRAL_SECRET_FILE": str(home / "empty")}
    elif case == "missing secret file":
        env |= {"CORRAL_SECRET_FILE": str(home / "nope")}
    elif case in ("broken cluster.json", "cluster.json without url"):
        (home / ".config" / "corral").mkdir(parents=True)
        (home / ".config" / "corral" / "cluster.json").write_text("{" if case.startswith("broken") else "{}")
    cli_answer, our_answer = both(env)
    if case == "broken cluster.json":  # both fail; json's and jsontext's parse errors are worded differently
        assert isinstance(cli_answer, str) and isinstance(our_answer, str)
        assert cli_answer.split(":")[0] == our_answer.split(":")[0]
    else:
        assert cli_answer == our_answer


def test_default_port_is_the_clis():
    assert target.DEFAULT_URL == config.DEFAULT_URL


@pytest.mark.parametrize("variables", [{"LOGNAME": "ada", "USER": "bob"}, {"USER": "bob"}, {"USERNAME": "cy"}, {}])
def test_user_is_the_clis(monkeypatch, variables):
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    import os
    assert target.current_user(os.environ) == config.current_user()


def test_job_environment_matches_the_clis_with_export_all(tmp_path):
    import io

    from corral.cli.submit import build_body, split_command_line

    environ = {"PATH": "/bin", "CORRAL_SECRET": "s", "SLURM_JOB_ID": "3", "SLURMD_NODENAME": "n", "HOME": "/h"}
    body = build_body(split_command_line(["--wrap", "true"]), io.StringIO(""), environ, cwd=str(tmp_path))
    assert body["env"] == job_environment(None, environ) == {"PATH": "/bin", "HOME": "/h"}


def test_cluster_json_names_every_controller_and_its_secret_serves_them_all(home):
    (home / ".config" / "corral").mkdir(parents=True)
    (home / ".config" / "corral" / "cluster.json").write_text(json.dumps({
        "url": "http://h:1", "urls": ["http://h:1", "http://h:2/"], "secret_file": str(home / "secret")}))
    env = {"HOME": str(home)}
    found = target.resolve_target(env)
    assert (found.url, found.urls, found.secret) == ("http://h:1", ("http://h:1", "http://h:2"), "from-file")
    cli = config.resolve_target(None, env)
    assert (cli.url, cli.urls, cli.secret) == ("http://h:1", ("http://h:1", "http://h:2"), "from-file")
    # CORRAL_URL naming some of the file's controllers gets its secret; naming another controller, none.
    assert target.resolve_target({**env, "CORRAL_URL": "h:2,h:1"}).secret == "from-file"
    assert target.resolve_target({**env, "CORRAL_URL": "h:2,h:3"}).secret is None


def test_an_older_cluster_json_with_only_url_still_works(home):
    write_cluster(home / ".config", "http://h:1", home / "secret")
    assert target.resolve_target({"HOME": str(home)}).urls == ("http://h:1",)


@pytest.mark.parametrize(("urls", "message"), [
    ("http://h:1", '"urls" must be a list of URLs'),
    ([], "names no controller URL"),
    (["http://h:1", "http://h:1"], "names the controller http://h:1 more than once"),
])
def test_a_bad_urls_list_in_cluster_json_is_named(home, urls, message):
    (home / ".config" / "corral").mkdir(parents=True)
    (home / ".config" / "corral" / "cluster.json").write_text(json.dumps({"url": "http://h:1", "urls": urls}))
    cli_answer, our_answer = both({"HOME": str(home)})
    assert message in our_answer and cli_answer == our_answer
