"""Where the controller is and who is asking: the one implementation of these rules, for the Slurm
commands and the `corral` CLI (corral.cli.config wraps it). Stdlib-only and light: dataclasses,
pathlib, getpass and json would cost the Slurm commands ~25 ms of a start of a few tens.

cluster.json: the user's ($XDG_CONFIG_HOME/corral/cluster.json), else the system-wide one
(SYSTEM_CLUSTER_FILE, or `CORRAL_SYSTEM_CLUSTER_FILE`), both written by `corral up`.
URL: `CORRAL_URL`, else the `urls` (older files: `url`) of cluster.json, else DEFAULT_URL. Each may name
several controllers (CORRAL_URL comma-separated, `urls` a list): the clients follow their leader (leader.py).
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
    __slots__ = ("url", "urls", "secret", "source", "ca_file", "reused_from")

    def __init__(self, url: str, secret: str | None, source: str, ca_file: str | None = None,
                 urls: tuple[str, ...] = (), reused_from: str | None = None) -> None:
        self.url = url  # the first controller
        self.urls = urls or (url,)  # every controller, the first one first
        self.secret = secret
        self.source = source  # where the URL came from, for messages: "CORRAL_URL", a path, "default"
        self.ca_file = ca_file
        self.reused_from = reused_from  # the auth socket whose credential was reused (credential_reuse)

    def __repr__(self) -> str:
        return (f"Target(urls={self.urls!r}, secret={'***' if self.secret else None}, source={self.source!r}, "
                f"ca_file={self.ca_file!r})")


def cluster_file(env: Mapping[str, str]) -> str:
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".config")
    return os.path.join(base, "corral", CLUSTER_FILE_NAME)


def normalize_url(url: str) -> str:
    url = url.strip()
    return (url if "://" in url else f"http://{url}").rstrip("/")


def parse_urls(text: str, source: str) -> tuple[str, ...]:
    """A comma-separated list of controller URLs (one is a list too), normalized, in order."""
    parts = text.split(",")
    if not all(part.strip() for part in parts):
        raise TargetError(f"{source}={text!r} has an empty controller URL: expected one URL or several "
                          "separated by commas, e.g. http://head1:6817,http://head2:6817")
    return check_urls(tuple(normalize_url(part) for part in parts), source)


def check_urls(urls: tuple[str, ...], source: str) -> tuple[str, ...]:
    if not urls:
        raise TargetError(f"{source} names no controller URL")
    for url in urls:
        scheme = url.partition("://")[0]
        if scheme not in ("http", "https") or not url.partition("://")[2].split("/")[0]:
            raise TargetError(f"invalid controller URL {url!r} (from {source}): expected http://HOST:PORT")
    repeated = sorted({url for url in urls if urls.count(url) > 1})
    if repeated:
        raise TargetError(f"{source} names the controller {repeated[0]} more than once")
    if len({url.partition("://")[0] for url in urls}) > 1:
        raise TargetError(f"{source} mixes http:// and https:// controllers ({', '.join(urls)}): all of a "
                          "cluster's controllers serve the same way")
    return urls


def cluster_urls(cluster: Mapping, path: str) -> tuple[str, ...]:
    """The controllers cluster.json names: its `urls`, else (an older file) its `url`."""
    listed = cluster.get("urls")
    if listed is None:
        return check_urls((normalize_url(cluster["url"]),), path)
    if not isinstance(listed, list) or not all(isinstance(url, str) for url in listed):
        raise TargetError(f"{path}: \"urls\" must be a list of URLs; run 'corral up' again or remove the file")
    return check_urls(tuple(normalize_url(url) for url in listed), f"{path} (\"urls\")")


def system_cluster_file(env: Mapping[str, str]) -> str:
    return env.get("CORRAL_SYSTEM_CLUSTER_FILE") or SYSTEM_CLUSTER_FILE


def resolve_target(env: Mapping[str, str] = os.environ, url_option: str | None = None, reuse: bool = False) -> Target:
    """`url_option` is the `corral` CLI's --url, which wins over everything. `reuse`: a credential from an
    auth socket may be one the command helper kept (corral.slurm.common.credential_reuse; the caller's client must
    then ask again once with a fresh one if the controller refuses it: corral.slurm.common.http does)."""
    path = cluster_file(env)
    cluster = read_cluster_file(path)
    if cluster is None:
        path = system_cluster_file(env)
        cluster = read_cluster_file(path)
    if url_option:
        urls, source = parse_urls(url_option, "--url"), "--url"
    elif env.get("CORRAL_URL"):
        urls, source = parse_urls(env["CORRAL_URL"], "CORRAL_URL"), "CORRAL_URL"
    elif cluster:
        urls, source = cluster_urls(cluster, path), path
    else:
        urls, source = (DEFAULT_URL,), "default"
    # The file's secret and CA belong to its cluster: only for URLs it names.
    described = cluster is not None and set(urls) <= set(cluster_urls(cluster, path))
    secret, reused_from = _secret_for(env, cluster if described else None, reuse)
    return Target(urls[0], secret, source, _ca_file_for(env, cluster if described else None), urls, reused_from)


def _ca_file_for(env: Mapping[str, str], cluster: dict | None) -> str | None:
    if env.get("CORRAL_CA_FILE"):
        return env["CORRAL_CA_FILE"]
    if cluster and isinstance(cluster.get("ca_file"), str):
        return cluster["ca_file"]
    return None


def _secret_for(env: Mapping[str, str], cluster: dict | None, reuse: bool) -> tuple[str | None, str | None]:
    """The credential, and the auth socket it came from when it is one reused from an earlier call."""
    if env.get("CORRAL_TOKEN"):
        return env["CORRAL_TOKEN"].strip(), None
    if env.get("CORRAL_SECRET"):
        return env["CORRAL_SECRET"].strip(), None
    if env.get("CORRAL_SECRET_FILE"):
        return read_secret(env["CORRAL_SECRET_FILE"]), None
    if not cluster:
        return None, None
    if cluster.get("secret_file"):
        return read_secret(cluster["secret_file"]), None
    if cluster.get("auth_socket"):
        path = cluster["auth_socket"]
        from corral.slurm.common.credential_reuse import active

        kept = active() if reuse else None
        reused = kept.credential(path) if kept is not None else None
        if reused is not None:
            return reused, path
        return socket_credential(path, kept), None
    return None, None


def socket_credential(path: str, kept=None) -> str:  # noqa: ANN001 - corral.slurm.common.credential_reuse.Reuse
    """A user credential from the controller's auth socket, which learns who we are from the kernel; `kept`
    remembers it for the command helper's next calls."""
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
    if kept is not None:
        kept.remember(path, answer)
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
