"""`corral agent join URL --token TOKEN`: a new machine exchanges a one-time join token (`corral token create
--join`) for its node's agent credential, and writes what the corral-agent systemd unit reads
(docs/adding-a-machine.md)."""
from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated

import typer

from corral.cli.errors import CliError
from corral.cli.helpstyle import CorralApp
from corral.cli.output import reported_errors

agent_app = CorralApp(help="Set up this machine as a compute node.", no_args_is_help=True)
DEFAULT_CREDENTIAL_FILE = Path("/etc/corral/agent.credential")
DEFAULT_ENV_FILE = Path("/etc/corral/agent.env")
AGENT_UNIT = "corral-agent"


def _default_node() -> str:
    return socket.gethostname().split(".")[0]


@agent_app.command("join")
def join(
    url: Annotated[str, typer.Argument(help="The controller's URL as this machine reaches it, e.g. "
                                            "https://head:6817 (several controllers: every URL, comma-separated).",
                                       show_default=False)],
    token: Annotated[str | None, typer.Option("--token", envvar="CORRAL_JOIN_TOKEN", show_default=False,
                                              help="The join token (corral token create --join); "
                                                   "or $CORRAL_JOIN_TOKEN.")] = None,
    node: Annotated[str | None, typer.Option("--node", show_default=False,
                                             help="This node's name in the cluster (default: the host's "
                                                  "short name).")] = None,
    credential_file: Annotated[Path, typer.Option("--credential-file",
                                                  help="Where to write the node's agent credential (0600).")]
    = DEFAULT_CREDENTIAL_FILE,
    env_file: Annotated[Path, typer.Option("--env-file", help="The corral-agent unit's settings, written if "
                                                              "missing (CORRAL_CONTROLLER, CORRAL_NODE).")]
    = DEFAULT_ENV_FILE,
    ca_file: Annotated[Path | None, typer.Option("--ca-file", show_default=False,
                                                 help="CA certificate(s) that verify an https:// controller "
                                                      "(default: the system's CAs).")] = None,
) -> None:
    """Join this machine to the cluster with a one-time token: write its agent credential, then start the
    agent (systemctl enable --now corral-agent). A machine that has joined needs no token again."""
    with reported_errors():
        name = _node_name(node or _default_node())
        joined = _joined_node(credential_file)
        if joined is not None:
            if joined != name:
                raise CliError(f"{credential_file} holds node {joined}'s credential, not {name}'s: this machine "
                               f"joined as {joined} (remove the file to join again as {name})")
            typer.echo(f"corral: this machine has joined as node {name} ({credential_file}); nothing to do")
            _next_steps(url, name, credential_file, env_file, ca_file)
            return
        if not token:
            raise CliError("a join token is needed: --token TOKEN or $CORRAL_JOIN_TOKEN "
                           "(an admin makes one on the head: corral token create --join --node NAME)")
        _check_writable(credential_file)
        credential, cluster_id = _exchange(url, token.strip(), name, ca_file)
        _write_files(credential, credential_file, env_file, url, name, ca_file, cluster_id)
    typer.echo(f"corral: joined the cluster as node {name}; its credential is in {credential_file}")
    _next_steps(url, name, credential_file, env_file, ca_file)


def _node_name(text: str) -> str:
    from corral.hostlist import HostlistError, check_node_name

    try:
        return check_node_name(text)
    except HostlistError as exc:
        raise CliError(f"invalid node name: {exc}") from None


def _joined_node(path: Path) -> str | None:
    """The node whose agent credential the file holds, or None if there is none."""
    from corral.controller.credentials import AGENT_PREFIX

    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None
    if not text:
        return None
    if not text.startswith(AGENT_PREFIX):
        raise CliError(f"{path} holds something that is not an agent credential: move it away to join")
    return text[len(AGENT_PREFIX):].rpartition(".")[0]


def _check_writable(path: Path) -> None:
    """Before the token is used up: the credential's directory can be written."""
    import os

    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    except OSError as exc:
        raise CliError(f"cannot make {path.parent}: {exc}") from None
    if not os.access(path.parent, os.W_OK):
        raise CliError(f"cannot write {path}: {path.parent} is not writable by this user (run as root)")


def _exchange(url: str, token: str, node: str, ca_file: Path | None) -> tuple[str, str | None]:
    """The node's agent credential, and the cluster's id on its hosts if the controller has one (/health):
    the agent carries it as its cluster's other agents do."""
    from corral.cli.client import Client, ClientError
    from corral.cli.config import check_url
    from corral.controller.credentials import AGENT_PREFIX, JOIN_PREFIX
    from corral.slurm.common.target import TargetError, parse_urls

    try:
        urls = parse_urls(url, "the command line")
    except TargetError as exc:
        raise CliError(str(exc)) from None
    for one in urls:
        check_url(one, "the command line")
    if not token.startswith(JOIN_PREFIX):
        raise CliError(f"--token is not a join token (they start with {JOIN_PREFIX}; corral token create --join)")
    with Client(urls, token, ca_file=str(ca_file.absolute()) if ca_file else None) as client:
        try:
            reply = client.join(node)
        except ClientError as exc:
            if exc.status in (401, 403):  # its words, without the hint about the cluster secret
                raise CliError(f"the controller refused to join node {node}: {exc.detail}") from None
            raise
        credential = reply.get("credential", "") if isinstance(reply, dict) else ""
        if not credential.startswith(AGENT_PREFIX):
            raise CliError(f"the controller at {url} sent no agent credential")
        return credential, _cluster_id(client.health())


def _cluster_id(health: dict) -> str | None:
    from corral.protocol import check_cluster_id

    found = health.get("cluster_id") if isinstance(health, dict) else None
    if found is None:
        return None
    try:
        return check_cluster_id(str(found))
    except ValueError as exc:
        raise CliError(f"the controller's /health names a cluster id this agent cannot take: {exc}") from None


def _write_files(credential: str, credential_file: Path, env_file: Path, url: str, node: str,
                 ca_file: Path | None, cluster_id: str | None = None) -> None:
    from corral.private_file import write_atomic

    try:
        write_atomic(credential_file, credential + "\n", 0o600)
        if not env_file.exists():
            args = " ".join(([f"--ca-file {ca_file.absolute()}"] if ca_file else [])
                            + ([f"--cluster-id {cluster_id}"] if cluster_id else []))
            env_file.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            write_atomic(env_file, f"# Written by corral agent join; see contrib/systemd/agent.env.\n"
                                   f"CORRAL_CONTROLLER={url}\nCORRAL_NODE={node}\nCORRAL_AGENT_ARGS={args}\n", 0o644)
    except OSError as exc:
        raise CliError(f"cannot write the node's files: {exc} (the token is used up: an admin makes a new one, "
                       f"or gets the credential with python -m corral.controller --agent-credential {node})") from None


def _next_steps(url: str, node: str, credential_file: Path, env_file: Path, ca_file: Path | None) -> None:
    ca = f" --ca-file {ca_file.absolute()}" if ca_file else ""
    typer.echo(f"Start the agent: systemctl enable --now {AGENT_UNIT} (settings: {env_file}); or by hand:\n"
               f"  python -m corral.agent --controller {url} --node {node} --secret-file {credential_file}{ca}")
