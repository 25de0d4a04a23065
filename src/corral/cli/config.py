"""Where the cluster is: URL and secret discovery, and the files `corral up` writes.

Precedence: `--url` > `CORRAL_URL` > `cluster.json` (written by `corral up`) > DEFAULT_URL. Each may name
several controllers (comma-separated; cluster.json's `urls`): the client follows their leader.
The secret comes from `CORRAL_SECRET`, else `CORRAL_SECRET_FILE`, else cluster.json's secret file
when cluster.json describes the chosen URL, else there is none (a controller without auth).
An https:// controller is verified against `CORRAL_CA_FILE`, else cluster.json's `ca_file` (same rule)."""
from __future__ import annotations

import contextlib
import getpass
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from corral.cli.errors import ConfigError
from corral.private_file import write_atomic

DEFAULT_PORT = 6817  # slurmctld's port: familiar, and free on a machine without Slurm
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"  # = corral.slurm.common.target.DEFAULT_URL
CLUSTER_FILE_NAME = "cluster.json"


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    secret: str | None
    source: str  # where the URL came from, for messages: "--url", "CORRAL_URL", a path, "default"
    ca_file: str | None = None  # verifies an https:// controller; None: the system's trusted CAs
    urls: tuple[str, ...] = ()  # every controller, `url` (the first) first

    def __post_init__(self) -> None:
        if not self.urls:
            object.__setattr__(self, "urls", (self.url,))


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


def resolve_target(url_option: str | None, env: Mapping[str, str] = os.environ) -> Target:
    # The rules live in corral.slurm.common.target, shared with the Slurm commands.
    from corral.slurm.common import target

    try:
        found = target.resolve_target(env, url_option)
    except target.TargetError as exc:
        raise ConfigError(str(exc)) from None
    for url in found.urls:
        check_url(url, found.source)
    return Target(found.url, found.secret, found.source, found.ca_file, found.urls)


def check_url(url: str, source: str) -> None:
    """ConfigError, naming where the URL came from, unless it is http(s)://HOST[:PORT][/PATH]."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
    except ValueError as exc:
        raise ConfigError(f"invalid controller URL {url!r} (from {source}): {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"invalid controller URL {url!r} (from {source}): expected http://HOST:PORT")


def _urls_fields(url: str | tuple[str, ...]) -> dict:
    """cluster.json's `url` and, for several controllers, `urls` (all of them; `url` is the first, for
    readers older than `urls`). One controller's file stays as it always was."""
    urls = (url,) if isinstance(url, str) else url
    return {"url": urls[0], "urls": list(urls)} if len(urls) > 1 else {"url": urls[0]}


def write_cluster_file(url: str | tuple[str, ...], secret_file: Path, env: Mapping[str, str] = os.environ,
                       auth_socket: Path | None = None, ca_file: Path | None = None,
                       cluster_id: str | None = None) -> Path | None:
    """`url`: the controller's, or every controller's of the cluster. None, and nothing written, when the file
    describes another cluster still running here (its auth socket listens): it is that cluster's users'
    way in, and this one is reached by CORRAL_URL and CORRAL_SECRET_FILE instead."""
    path = cluster_file(env)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = {**_urls_fields(url), "secret_file": str(secret_file)}
    if auth_socket is not None:
        data["auth_socket"] = str(auth_socket)
    if ca_file is not None:
        data["ca_file"] = str(ca_file)
    if cluster_id is not None:
        data["cluster_id"] = cluster_id
    with _locked(path):
        if another_running_cluster(path, data) is not None:
            return None
        write_private_file(path, json.dumps(data, indent=2) + "\n")
    return path


def system_cluster_file(env: Mapping[str, str] = os.environ) -> Path:
    from corral.slurm.common.target import system_cluster_file as path

    return Path(path(env))


def write_system_cluster_file(url: str | tuple[str, ...], auth_socket: Path, env: Mapping[str, str] = os.environ,
                              ca_file: Path | None = None, cluster_id: str | None = None,
                              instead: Path | None = None) -> Path | None:
    """The system-wide cluster.json (world-readable, no secret): every user of the host finds the cluster
    and its auth socket there without configuring anything; with TLS, a world-readable copy of the CA
    certificate beside it (the cluster's own sits in the private state dir). Where it describes another
    cluster still running here (its auth socket listens), it stays that cluster's: this one's goes to
    `instead` (its users point CORRAL_SYSTEM_CLUSTER_FILE there), or nowhere (None) without one. Returns
    the path written."""
    path = system_cluster_file(env)
    data = {**_urls_fields(url), "auth_socket": str(auth_socket)}
    if cluster_id is not None:
        data["cluster_id"] = cluster_id
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    with _locked(path):
        if another_running_cluster(path, data) is None:
            _write_public_cluster_file(path, data, ca_file)
            return path
    if instead is None:
        return None
    instead.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    _write_public_cluster_file(instead, data, ca_file)
    return instead


def _write_public_cluster_file(path: Path, data: dict, ca_file: Path | None) -> None:
    if ca_file is not None:
        public_ca = path.with_name(f"{path.stem}-ca.pem")
        write_atomic(public_ca, ca_file.read_bytes(), 0o644)
        data = {**data, "ca_file": str(public_ca)}
    write_private_file(path, json.dumps(data, indent=2) + "\n")
    path.chmod(0o644)


def remove_system_cluster_file(path: Path, url: str, cluster_id: str | None = None) -> None:
    """Remove it if it still describes this cluster (by its id; by URL for a cluster without one): another
    cluster's file, one this cluster never took over or one that replaced it, stays."""
    if not path.parent.is_dir():
        return
    with _locked(path):
        data = _read_cluster_data(path)
        if data is None or not _same_cluster(data, {"url": url, "cluster_id": cluster_id}):
            return
        with contextlib.suppress(OSError):
            if isinstance(data.get("ca_file"), str):
                Path(data["ca_file"]).unlink(missing_ok=True)
            path.unlink()


def another_running_cluster(path: Path, ours: dict) -> dict | None:
    """What the cluster file at `path` holds, if it describes a cluster other than `ours` that still runs on
    this host: its auth socket listens. A file of a cluster that is gone (or that names no socket) is
    stale, and None."""
    from corral.unix_auth_socket import listening

    data = _read_cluster_data(path)
    if data is None or _same_cluster(data, ours):
        return None
    socket = data.get("auth_socket")
    return data if isinstance(socket, str) and listening(socket) else None


def _same_cluster(data: dict, ours: dict) -> bool:
    if ours.get("cluster_id") is not None or data.get("cluster_id") is not None:
        return data.get("cluster_id") == ours.get("cluster_id")
    return data.get("url") == ours.get("url")


def _read_cluster_data(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold a lock on the directory of `path` (flock: no lock file left behind): whether a cluster file is
    another's is read and acted on at once (two `corral up` starting or stopping together)."""
    import fcntl

    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_private_file(path: Path, text: str) -> None:
    """Write atomically with mode 0600 from the start (no window where others could read it)."""
    write_atomic(path, text, 0o600)
