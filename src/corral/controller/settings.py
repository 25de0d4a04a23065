"""The controller's configuration file (TOML), read once at start; docs/configuration.md describes every key.

    cluster_name = "corral"
    kill_grace_s = 10
    node_timeout_s = 30
    [scheduler]
    max_reservations = 8
    [[partitions]]
    name = "gpu"
    nodes = "ALL"          # or a hostlist: "node[1-8]"
    default = true
    max_time_s = 604800    # omit for no limit
    default_time_s = 3600
    priority_job_factor = 1
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError

from corral import hostlist
from corral.api.tenancy import TenancySpec
from corral.core.model import SchedulerConfig
from corral.engine.config import EngineConfig, PartitionConfig

_TENANCY = set(TenancySpec.model_fields)
_TOP = {"cluster_name", "kill_grace_s", "node_timeout_s", "kill_report_timeout_s", "scheduler", "partitions"} | _TENANCY
_SCHED = {"max_reservations", "max_jobs_considered"}
_PART = {"name", "nodes", "default", "max_time_s", "default_time_s", "up", "priority_job_factor"}


class SettingsError(ValueError):
    pass


def load_settings(path: str | Path | None) -> tuple[EngineConfig, TenancySpec | None]:
    """The engine configuration, and the tenancy the file defines (None if it defines none)."""
    if path is None:
        return EngineConfig(), None
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"cannot read config {path}: {exc}") from None
    return settings_from_dict(data, str(path)), tenancy_from_dict(data, str(path))


def tenancy_from_dict(data: dict, origin: str = "config") -> TenancySpec | None:
    section = {k: v for k, v in data.items() if k in _TENANCY}
    if not section:
        return None
    try:
        return TenancySpec(**section)
    except ValidationError as exc:
        raise SettingsError(f"{origin}: {exc}") from None


def settings_from_dict(data: dict, origin: str = "config") -> EngineConfig:
    _only(data, _TOP, origin)
    sched = data.get("scheduler", {})
    _only(sched, _SCHED, f"{origin} [scheduler]")
    parts = data.get("partitions") or [{"name": "gpu", "default": True}]
    partitions = []
    for i, part in enumerate(parts):
        _only(part, _PART, f"{origin} partitions[{i}]")
        if "name" not in part:
            raise SettingsError(f"{origin} partitions[{i}]: 'name' is required")
        if part.get("nodes", "ALL") != "ALL":
            try:
                hostlist.expand(str(part["nodes"]))
            except hostlist.HostlistError as exc:
                raise SettingsError(f"{origin} partitions[{i}]: nodes: {exc}") from None
        try:
            partitions.append(PartitionConfig(**part))
        except ValueError as exc:
            raise SettingsError(f"{origin} partitions[{i}]: {exc}") from None
    top = {k: data[k] for k in ("cluster_name", "kill_grace_s", "node_timeout_s", "kill_report_timeout_s")
           if k in data}
    try:
        return EngineConfig(partitions=tuple(partitions), scheduler=SchedulerConfig(**sched), **top)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{origin}: {exc}") from None


def _only(section: dict, allowed: set[str], where: str) -> None:
    unknown = set(section) - allowed
    if unknown:
        raise SettingsError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
