"""Where the controller is and who is asking: the one implementation of these rules, for the Slurm
commands and the `corral` CLI (corral.cli.config wraps it). Stdlib-only and light: dataclasses,
pathlib, getpass and json would cost the Slurm commands ~25 ms of a start of a few tens.

cluster.json: the user's ($XDG_CONFIG_HOME/corral/cluster.json), else the system-wide one
(SYSTEM_CLUSTER_FILE, or `CORRAL_SYSTEM_CLUSTER_FILE`), both written by `corral up`.
URL: `CORRAL_URL`, else the `url` of cluster.json, else DEFAULT_URL.
Credential (docs/security.md): `CORRAL_TOKEN` (an API token, or a job's own credential), else the
cluster secret from `CORRAL_SECRET` or `CORRAL_SECRET_FILE`, else, when cluster.json describes the
chosen URL, its `secret_file` (the user who ran `corral up`) or a user credential from its
`auth_socket`, else none.
CA file (verifies an https:// controller): `CORRAL_CA_FILE`, else cluster.json's `ca_file` when
cluster.json describes the chosen URL, else the system's trusted CAs."""
from __future__ import annotations

import _socket
import os
from _collections_abc import Mapping

from corral.slurm.common import jsontext

DEFAULT_URL = "http://127.0.0.1:6817"  # corral.cli.config.DEFAULT_URL: slurmctld's port
CLUSTER_FILE_NAME = "cluster.json"
SYSTEM_CLUSTER_FILE = "/etc/corral/cluster.json"
AUTH_SOCKET_TIMEOUT_S = 10.0


class TargetError(Exception):
    """The cluster settings cannot be used; the message is complete."""


class Target:
    __slots__ = ("url", "secret", "source", "ca_file")

    def __init__(self, url: str, secret: str | None, source: str, ca_file: str | None = None) -> None:
        self.url = url
        self.secret = secret
        self.source = source  # where the URL came from, for messages: "CORRAL_URL", a path, "default"
        self.ca_file = ca_file

    def __repr__(self) -> str:
        return (f"Target(url={self.url!r}, secret={'***' if self.secret else None}, source={self.source!r}, "
                f"ca_file={self.ca_file!r})")


def cluster_file(env: Mapping[str, str]) -> str:
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".config")
    return os.path.join(base, "corral", CLUSTER_FILE_NAME)


def normalize_url(url: str) -> str:
    url = url.strip()
    return (url if "://" in url else f"http://{url}").rstrip("/")


def system_cluster_file(env: Mapping[str, str]) -> str:
    return env.get("CORRAL_SYSTEM_CLUSTER_FILE") or SYSTEM_CLUSTER_FILE


def resolve_target(env: Mapping[str, str] = os.environ, url_option: str | None = None) -> Target:
    """`url_option` is the `corral` CLI's --url, which wins over everything."""
    path = cluster_file(env)
    cluster = read_cluster_file(path)
    if cluster is None:
        path = system_cluster_file(env)
        cluster = read_cluster_file(path)
    if url_option:
        url, source = normalize_url(url_option), "--url"
    elif env.get("CORRAL_URL"):
        url, source = normalize_url(env["CORRAL_URL"]), "CORRAL_URL"
    elif cluster:
        url, source = normalize_url(cluster["url"]), path
    else:
        url, source = DEFAULT_URL, "default"
    return Target(url, _secret_for(url, env, cluster), source, _ca_file_for(url, env, cluster))


def _ca_file_for(url: str, env: Mapping[str, str], cluster: dict | None) -> str | None:
    if env.get("CORRAL_CA_FILE"):
        return env["CORRAL_CA_FILE"]
    if cluster and isinstance(cluster.get("ca_file"), str) and normalize_url(cluster["url"]) == url:
        return cluster["ca_file"]
    return None


def _secret_for(url: str, env: Mapping[str, str], cluster: dict | None) -> str | None:
    if env.get("CORRAL_TOKEN"):
        return env["CORRAL_TOKEN"].strip()
    if env.get("CORRAL_SECRET"):
        return env["CORRAL_SECRET"].strip()
    if env.get("CORRAL_SECRET_FILE"):
        return read_secret(env["CORRAL_SECRET_FILE"])
    if not cluster or normalize_url(cluster["url"]) != url:
        return None
    if cluster.get("secret_file"):
        return read_secret(cluster["secret_file"])
    if cluster.get("auth_socket"):
        return socket_credential(cluster["auth_socket"])
    return None


def socket_credential(path: str) -> str:
    """A user credential from the controller's auth socket, which learns who we are from the kernel."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(AUTH_SOCKET_TIMEOUT_S)
        sock.connect(path)
        chunks = []
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as exc:
        raise TargetError(f"cannot get a credential from the auth socket {path}: "
                          f"{exc.strerror or exc}; is the controller running?") from None
    finally:
        sock.close()
    answer = b"".join(chunks).decode(errors="replace").strip()
    if not answer or answer.startswith("error:"):
        raise TargetError(f"the auth socket {path} gave no credential: {answer or 'an empty answer'}")
    return answer


def read_secret(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            secret = handle.read().strip()
    except OSError as exc:
        raise TargetError(f"cannot read the cluster secret from {path}: {exc.strerror}") from None
    if not secret:
        raise TargetError(f"the cluster secret file {path} is empty")
    return secret


def read_cluster_file(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = jsontext.loads(handle.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise TargetError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        raise TargetError(f"{path} has no \"url\"; run 'corral up' again or remove the file")
    return data


def current_user(env: Mapping[str, str] = os.environ) -> str:
    """The login name as getpass.getuser() finds it (so jobs from `corral submit` and from sbatch
    belong to the same user); the uid as text where the system has no name for it."""
    for variable in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        if env.get(variable):
            return env[variable]
    import pwd
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())
