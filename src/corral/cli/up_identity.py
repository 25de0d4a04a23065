"""A `corral up` cluster's identity on this host: its id (in its agents' cgroup and spool names), and the
cluster files that tell users where it is, each left to another cluster still running here (issue 21)."""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from corral.cli.config import (
    another_running_cluster,
    cluster_file,
    system_cluster_file,
    write_cluster_file,
    write_system_cluster_file,
)
from corral.cli.errors import CliError
from corral.cli.up_plan import UpPlan
from corral.private_file import write_atomic

CLUSTER_ID_FILE = "cluster-id"


def cluster_identity(state_dir: Path) -> str:
    """The cluster's id on this host: the state dir's (STATE_DIR/cluster-id, kept as its CA is, so that the
    cluster started again finds what its agents left: their cgroups and spools carry it), or a new one that
    keep_cluster_id() records once the cluster starts."""
    from corral.protocol import check_cluster_id

    path = state_dir / CLUSTER_ID_FILE
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return secrets.token_hex(4)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc}") from None
    try:
        return check_cluster_id(text)
    except ValueError as exc:
        raise CliError(f"{path}: {exc} (remove the file to have a new one made)") from None


def keep_cluster_id(plan: UpPlan) -> None:
    """Record the plan's cluster id in the state dir (held by state_dir_lock), unless it is there."""
    if plan.cluster_id is None:
        return
    path = plan.state_dir / CLUSTER_ID_FILE
    if not path.exists():
        write_atomic(path, plan.cluster_id + "\n", 0o644)
    elif path.read_text().strip() != plan.cluster_id:
        raise CliError(f"{path} changed while 'corral up' started (another one ran with this state dir): "
                       "run it again")


@dataclass(frozen=True, slots=True)
class Recorded:
    """Where the cluster's users find it, and which cluster files were kept for another running cluster."""

    config_path: Path | None  # the user's cluster.json; None: it is another running cluster's
    system_file: Path | None = None  # root's cluster: the host's cluster.json, or this cluster's own copy
    user_file_owner: str | None = None  # the URL of the running cluster that keeps the user's cluster.json
    system_file_owner: str | None = None  # ... that keeps /etc/corral/cluster.json


def record_cluster(plan: UpPlan, urls: tuple[str, ...]) -> Recorded:
    """Write the user's cluster.json and, for root's cluster (it serves every user of the host), the host's;
    a file describing another cluster that still runs here is left to it (its users must keep reaching it),
    and the banner says how to reach this one instead."""
    ours = {"url": urls[0], "cluster_id": plan.cluster_id}
    user_owner = another_running_cluster(cluster_file(), ours)  # for the banner; the write checks again
    config_path = write_cluster_file(urls, plan.secret_file, auth_socket=plan.auth_socket, ca_file=plan.ca_file,
                                     cluster_id=plan.cluster_id)
    user_file_owner = None if config_path is not None else _url_of(user_owner)
    if os.geteuid() != 0 or plan.auth_socket is None:
        return Recorded(config_path, user_file_owner=user_file_owner)
    system_owner = another_running_cluster(system_cluster_file(), ours)
    system_file = write_system_cluster_file(urls, plan.auth_socket, ca_file=plan.ca_file,
                                            cluster_id=plan.cluster_id,
                                            instead=plan.auth_socket.with_name("cluster.json"))
    kept = system_file != system_cluster_file()
    return Recorded(config_path, system_file, user_file_owner, _url_of(system_owner) if kept else None)


def _url_of(cluster: dict | None) -> str:
    return str(cluster.get("url", "?")) if cluster is not None else "another cluster"


def user_file_words(plan: UpPlan, recorded: Recorded) -> str:
    """Where the user's cluster.json records the cluster, or how to reach it when that file is another's."""
    if recorded.config_path is not None:
        return f"(recorded with the URL in {recorded.config_path})"
    return (f"({cluster_file()} still serves the cluster at {recorded.user_file_owner}; reach this one with "
            f"CORRAL_URL={','.join(plan.urls or (plan.url,))} CORRAL_SECRET_FILE={plan.secret_file})")


def system_file_words(recorded: Recorded) -> str:
    if recorded.system_file is None:
        return "\n"
    if recorded.system_file_owner is None:
        return f" (found through {recorded.system_file})\n"
    return (f"\n             ({system_cluster_file()} still serves the cluster at {recorded.system_file_owner}: "
            f"this cluster's users set CORRAL_SYSTEM_CLUSTER_FILE={recorded.system_file})\n")
