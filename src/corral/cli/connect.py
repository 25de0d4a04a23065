"""Opening a client to the cluster the user means (see corral.cli.config for the precedence)."""
from __future__ import annotations

from corral.cli.client import Client
from corral.cli.config import resolve_target


def open_client(url_option: str | None = None, timeout_s: float = 10.0) -> Client:
    target = resolve_target(url_option)
    return Client(target.url, target.secret, timeout_s=timeout_s, ca_file=target.ca_file)
