import json
import stat

import pytest

from corral.cli.config import (
    DEFAULT_URL,
    Target,
    cluster_file,
    default_state_dir,
    resolve_target,
    write_cluster_file,
)
from corral.cli.errors import ConfigError


def test_xdg_paths_and_fallbacks(tmp_path):
    assert default_state_dir({"XDG_STATE_HOME": "/s"}).as_posix() == "/s/corral"
    assert default_state_dir({"HOME": "/h"}).as_posix() == "/h/.local/state/corral"
    assert cluster_file({"XDG_CONFIG_HOME": "/c"}).as_posix() == "/c/corral/cluster.json"
    assert cluster_file({"HOME": "/h"}).as_posix() == "/h/.config/corral/cluster.json"


def test_default_when_nothing_is_configured(tmp_path):
    target = resolve_target(None, {"XDG_CONFIG_HOME": str(tmp_path)})
    assert (target.url, target.secret, target.source) == (DEFAULT_URL, None, "default")


def test_cluster_file_written_by_up(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    secret = tmp_path / "secret"
    secret.write_text("abc\n")
    path = write_cluster_file("http://127.0.0.1:7000", secret, env)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"url": "http://127.0.0.1:7000", "secret_file": str(secret)}
    target = resolve_target(None, env)
    assert (target.url, target.secret, target.source) == ("http://127.0.0.1:7000", "abc", str(path))
    # --url naming the same cluster still finds its secret; another URL gets none.
    assert resolve_target("127.0.0.1:7000/", env).secret == "abc"
    assert resolve_target("http://other:1", env).secret is None


def test_precedence(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    secret_file = tmp_path / "s"
    secret_file.write_text("from-file")
    write_cluster_file("http://up:1", secret_file, env)
    env_url = {**env, "CORRAL_URL": "http://env:2", "CORRAL_SECRET": "from-env"}
    assert resolve_target(None, env_url) == Target("http://env:2", "from-env", "CORRAL_URL")
    assert resolve_target("http://opt:3", env_url).url == "http://opt:3"
    assert resolve_target("http://opt:3", env_url).source == "--url"
    with_file = {**env, "CORRAL_URL": "http://env:2", "CORRAL_SECRET_FILE": str(secret_file)}
    assert resolve_target(None, with_file).secret == "from-file"


@pytest.mark.parametrize(
    ("content", "message"),
    [("{not json", "cannot read"), ("[]", 'has no "url"'), ('{"url": 5}', 'has no "url"')],
)
def test_broken_cluster_file(tmp_path, content, message):
    path = cluster_file({"XDG_CONFIG_HOME": str(tmp_path)})
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        resolve_target(None, {"XDG_CONFIG_HOME": str(tmp_path)})


def test_unreadable_or_empty_secret(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the cluster secret from"):
        resolve_target(None, {"XDG_CONFIG_HOME": str(tmp_path), "CORRAL_SECRET_FILE": str(tmp_path / "none")})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        resolve_target(None, {"XDG_CONFIG_HOME": str(tmp_path), "CORRAL_SECRET_FILE": str(tmp_path / "empty")})


def test_commands_use_cluster_json(standin, cli, tmp_path, monkeypatch):
    """The path `corral up` sets up: no environment, only the cluster.json it wrote."""
    from .standin import SECRET

    monkeypatch.delenv("CORRAL_URL")
    monkeypatch.delenv("CORRAL_SECRET")
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    write_cluster_file(standin.url, secret)
    result = cli("queue")
    assert result.exit_code == 0, result.output
    assert "train" in result.stdout


def test_broken_config_is_a_clean_error(isolated, cli):
    path = cluster_file({"XDG_CONFIG_HOME": str(isolated / "config")})
    path.parent.mkdir(parents=True)
    path.write_text("oops")
    result = cli("nodes")
    assert result.exit_code == 1 and result.stderr.startswith(f"corral: error: cannot read {path}")


def test_current_user_falls_back_to_the_uid(monkeypatch):
    import os

    from corral.cli.config import current_user

    def no_name():
        raise KeyError("getpwuid(): uid not found")

    monkeypatch.setattr("getpass.getuser", no_name)
    assert current_user() == str(os.getuid())


def test_cluster_file_of_several_controllers_lists_them_all(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    secret = tmp_path / "secret"
    secret.write_text("abc\n")
    urls = ("http://127.0.0.1:7000", "http://127.0.0.1:7001")
    path = write_cluster_file(urls, secret, env)
    # `url` stays, the first controller's, for readers older than `urls`.
    assert json.loads(path.read_text()) == {"url": urls[0], "urls": list(urls), "secret_file": str(secret)}
    target = resolve_target(None, env)
    assert (target.url, target.urls, target.secret) == (urls[0], urls, "abc")
