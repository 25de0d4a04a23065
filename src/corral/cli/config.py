"""Where the cluster is: URL and secret discovery, and the files `corral up` writes.

Precedence: `--url` > `CORRAL_URL` > `cluster.json` (written by `corral up`) > DEFAULT_URL.
The secret comes from `CORRAL_SECRET`, else `CORRAL_SECRET_FILE`, else cluster.json's secret file
when cluster.json describes the chosen URL, else there is none (a controller without auth)."""
from __future__ import annotations

import getpass
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from corral.cli.errors import ConfigError

DEFAULT_PORT = 6817  # slurmctld's port: familiar, and free on a machine without Slurm
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
CLUSTER_FILE_NAME = "cluster.json"


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    secret: str | None
    source: str  # where the URL came from, for messages: "--url", "CORRAL_URL", a path, "default"


def _xdg_dir(env: Mapping[str, str], variable: str, fallback: str) -> Path:
    base = env.get(variable) or str(Path(env.get("HOME") or Path.home()) / fallback)
    return Path(base) / "corral"


def current_user() -> str:
    """The login name; the uid as text where the system has no name for it (bare containers)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def default_state_dir(env: Mapping[str, str] = os.environ) -> Path:
    return _xdg_dir(env, "XDG_STATE_HOME", ".local/state")


def cluster_file(env: Mapping[str, str] = os.environ) -> Path:
    return _xdg_dir(env, "XDG_CONFIG_HOME", ".config") / CLUSTER_FILE_NAME


def normalize_url(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if "://" in url else f"http://{url}"


def resolve_target(url_option: str | None, env: Mapping[str, str] = os.environ) -> Target:
    path = cluster_file(env)
    cluster = read_cluster_file(path)
    if url_option:
        url, source = normalize_url(url_option), "--url"
    elif env.get("CORRAL_URL"):
        url, source = normalize_url(env["CORRAL_URL"]), "CORRAL_URL"
    elif cluster:
        url, source = normalize_url(cluster["url"]), str(path)
    else:
        url, source = DEFAULT_URL, "default"
    return Target(url, _secret_for(url, env, cluster), source)


def _secret_for(url: str, env: Mapping[str, str], cluster: dict | None) -> str | None:
    if env.get("CORRAL_SECRET"):
        return env["CORRAL_SECRET"].strip()
    if env.get("CORRAL_SECRET_FILE"):
        return read_secret(Path(env["CORRAL_SECRET_FILE"]))
    if cluster and cluster.get("secret_file") and normalize_url(cluster["url"]) == url:
        return read_secret(Path(cluster["secret_file"]))
    return None


def read_secret(path: Path) -> str:
    try:
        secret = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the cluster secret from {path}: {exc.strerror}") from None
    if not secret:
        raise ConfigError(f"the cluster secret file {path} is empty")
    return secret


def read_cluster_file(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        raise ConfigError(f"{path} has no \"url\"; run 'corral up' again or remove the file")
    return data


def write_cluster_file(url: str, secret_file: Path, env: Mapping[str, str] = os.environ) -> Path:
    path = cluster_file(env)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_private_file(path, json.dumps({"url": url, "secret_file": str(secret_file)}, indent=2) + "\n")
    return path


def write_private_file(path: Path, text: str) -> None:
    """Write atomically with mode 0600 from the start (no window where others could read it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode is masked by the umask; a reused tmp keeps its own
        with os.fdopen(fd, "w") as handle:
            fd = -1
            handle.write(text)
        os.replace(tmp, path)
    finally:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
