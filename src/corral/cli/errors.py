"""Errors the command line reports as `corral: error: <message>` with exit status 1."""
from __future__ import annotations


class CliError(Exception):
    """A problem to tell the user about; the message is complete as is."""


class ConfigError(CliError):
    """The cluster settings (URL, secret, cluster.json) cannot be used."""
