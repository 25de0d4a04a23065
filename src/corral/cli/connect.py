"""Opening a client to the cluster the user means (see corral.cli.config for the precedence)."""
from __future__ import annotations

import os

from corral.cli.client import Client
from corral.cli.config import resolve_target
from corral.cli.errors import ConfigError
from corral.slurm.common.leader import leader_wait_s


def open_client(url_option: str | None = None, timeout_s: float = 10.0) -> Client:
    target = resolve_target(url_option)
    try:
        wait_s = leader_wait_s(os.environ)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return Client(target.urls, target.secret, timeout_s=timeout_s, ca_file=target.ca_file, leader_wait_s=wait_s)
