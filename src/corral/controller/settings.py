"""The controller's configuration file (TOML), read once at start; docs/configuration.md describes every key.

    cluster_name = "corral"
    kill_grace_s = 10
    node_timeout_s = 30
    shards_per_gpu = 8     # --gres=shard:N takes N of these of one GPU
    [scheduler]
    max_reservations = 8
    placement = "fgd"      # or "bestfit" (default), "fgd+cpu"
    task_mix = [{gpus = 1, gpu_milli = 500, cpus = 4, weight = 3}, {gpus = 8, cpus = 64}]
    [[partitions]]
    name = "gpu"
    nodes = "ALL"          # or a hostlist: "node[1-8]"
    default = true
    max_time_s = 604800    # omit for no limit
    default_time_s = 3600
    priority_job_factor = 1
    [auth]
    admins = ["alice"]     # root (uid 0) is always admin
    operators = ["bob"]
    socket = "/run/corral/corral/auth.sock"
    credential_ttl_s = 300
    agents_vouch_for_admins = false  # agents' auth sockets never give root or an admin/operator role
    agents_vouch_min_uid = 1000  # nor a system account (uid below this)
    public_metrics = false # GET /metrics needs a credential (any valid one)
    [ratelimit]            # per-user request rate limits (Slurm's rl_enable); the defaults are Slurm's
    enabled = false
    bucket_size = 30       # requests at once
    refill_rate = 2        # tokens back ...
    refill_period_s = 1    # ... every this many seconds
    table_size = 8192      # users tracked (the least recently seen make room)
    records_per_token = 1000   # a job list costs a token more per this many jobs (0: one token, any size)
    [http]                 # request bodies and slow clients (controller/body_gate.py, http_server.py)
    max_body_mib = 32      # job submissions, steps and the tenancy document
    max_agent_body_mib = 32    # agents' registrations and event batches (every other route: 1 MiB)
    idle_timeout_s = 5     # a connection with no request under way
    header_timeout_s = 10  # from a request's first byte to the end of its headers
    body_timeout_s = 60    # from the end of the headers to the end of the body
    [gateway]              # the services' gateway (corral gateway), which `corral up` fills in
    url = "https://gpu.example.org:6820"   # as users' browsers reach it: the dashboard's notebook links
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError

from corral import hostlist
from corral.api.tenancy import TenancySpec
from corral.controller.auth import DEFAULT_CREDENTIAL_TTL_S, AuthSettings
from corral.controller.body_gate import HttpSettings
from corral.controller.identity_rules import DEFAULT_VOUCH_MIN_UID
from corral.controller.ratelimit import RateLimitSettings
from corral.core.config import PLACEMENTS, SchedulerConfig
from corral.core.model import GPU_MILLI, TaskShape
from corral.engine.config import EngineConfig, PartitionConfig

_TENANCY = set(TenancySpec.model_fields)
_TOP = {"cluster_name", "kill_grace_s", "node_timeout_s", "kill_report_timeout_s", "shards_per_gpu", "scheduler",
        "partitions", "auth", "expedite_hold_s", "ratelimit",
        "gpu_idle_cancel_s", "gpu_idle_flag_s", "self_fencing", "http", "launch_parameters", "gateway",
        "min_cycle_interval_s"} | _TENANCY
_AUTH = {"admins", "operators", "socket", "credential_ttl_s", "agents_vouch_for_admins", "agents_vouch_min_uid",
         "public_metrics"}
_RATELIMIT = {"enabled", "bucket_size", "refill_rate", "refill_period_s", "table_size", "records_per_token"}
# The largest value each [ratelimit] number may take (the least is 1).
_RATELIMIT_MAX = {"bucket_size": 1_000_000, "refill_rate": 1_000_000, "refill_period_s": 3600,
                  "table_size": 10_000_000}
RECORDS_PER_TOKEN_MAX = 10_000_000
# [http]: each key's least and largest value (sizes in MiB, times in seconds).
_HTTP_RANGES = {"max_body_mib": (1, 1024), "max_agent_body_mib": (1, 1024), "idle_timeout_s": (1, 3600),
                "header_timeout_s": (1, 3600), "body_timeout_s": (1, 3600)}
_HTTP = set(_HTTP_RANGES)
_GATEWAY = {"url"}
_SCHED = {"max_reservations", "max_jobs_considered", "placement", "fgd_cpu_weight", "task_mix"}
_TASK = {"gpus", "gpu_milli", "cpus", "gpu_model", "weight"}
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


def load_auth_settings(path: str | Path | None) -> AuthSettings:
    """The [auth] section (defaults without a file)."""
    if path is None:
        return AuthSettings()
    return auth_from_dict(_read(path).get("auth", {}), str(path))


def load_ratelimit_settings(path: str | Path | None) -> RateLimitSettings:
    """The [ratelimit] section (defaults without a file)."""
    if path is None:
        return RateLimitSettings()
    return ratelimit_from_dict(_read(path).get("ratelimit", {}), str(path))


def load_http_settings(path: str | Path | None) -> HttpSettings:
    """The [http] section (defaults without a file)."""
    if path is None:
        return HttpSettings()
    return http_from_dict(_read(path).get("http", {}), str(path))


def load_gateway_url(path: str | Path | None) -> str | None:
    """The [gateway] section's url (None without a file, or where it names none)."""
    if path is None:
        return None
    return gateway_url_from_dict(_read(path).get("gateway", {}), str(path))


def gateway_url_from_dict(section: object, origin: str = "config") -> str | None:
    where = f"{origin} [gateway]"
    if not isinstance(section, dict):
        raise SettingsError(f"{where}: a table")
    _only(section, _GATEWAY, where)
    if "url" not in section:
        return None
    return check_gateway_url(section["url"], f"{where} url")


def check_gateway_url(value: object, where: str) -> str:
    """The gateway's public URL as users' browsers reach it, without its trailing slash: the dashboard
    builds its services' links (URL/s/NAME/) from it, so anything else is refused here, not in a browser."""
    from urllib.parse import urlsplit

    if not isinstance(value, str):
        raise SettingsError(f"{where}: {value!r}: a URL as a string, such as \"https://gpu.example.org:6820\"")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (a port that is no number or out of range raises here)
    except ValueError as exc:
        raise SettingsError(f"{where}: {value!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SettingsError(f"{where}: {value!r}: an http:// or https:// URL with a host, such as "
                            "\"https://gpu.example.org:6820\"")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise SettingsError(f"{where}: {value!r}: no query, fragment or credentials: the gateway's address only")
    return value.rstrip("/")


def _read(path: str | Path) -> dict:
    try:
        return tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"cannot read config {path}: {exc}") from None


def ratelimit_from_dict(section: object, origin: str = "config") -> RateLimitSettings:
    where = f"{origin} [ratelimit]"
    if not isinstance(section, dict):
        raise SettingsError(f"{where}: a table")
    _only(section, _RATELIMIT, where)
    enabled = section.get("enabled", False)
    if not isinstance(enabled, bool):
        raise SettingsError(f"{where}: enabled {enabled!r}: true or false")
    numbers, defaults = {}, RateLimitSettings()
    for key, most in _RATELIMIT_MAX.items():
        value = section.get(key, getattr(defaults, key))
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
            raise SettingsError(f"{where}: {key} {value!r}: a whole number, 1..{most:,}")
        numbers[key] = value
    per = section.get("records_per_token", defaults.records_per_token)
    if isinstance(per, bool) or not isinstance(per, int) or not 0 <= per <= RECORDS_PER_TOKEN_MAX:
        raise SettingsError(f"{where}: records_per_token {per!r}: a whole number, 0 (no charge) to "
                            f"{RECORDS_PER_TOKEN_MAX:,}")
    return RateLimitSettings(enabled=enabled, records_per_token=per, **numbers)


def http_from_dict(section: object, origin: str = "config") -> HttpSettings:
    where = f"{origin} [http]"
    if not isinstance(section, dict):
        raise SettingsError(f"{where}: a table")
    _only(section, _HTTP, where)
    for key, (least, most) in _HTTP_RANGES.items():
        value = section.get(key, least)
        whole = key.endswith("_mib")
        kinds = int if whole else int | float
        if isinstance(value, bool) or not isinstance(value, kinds) or not least <= value <= most:
            raise SettingsError(f"{where}: {key} {value!r}: {'a whole number' if whole else 'a number'}, "
                                f"{least}..{most}")
    return HttpSettings(**section)


def auth_from_dict(section: object, origin: str = "config") -> AuthSettings:
    where = f"{origin} [auth]"
    if not isinstance(section, dict):
        raise SettingsError(f"{where}: a table")
    _only(section, _AUTH, where)
    lists = {}
    for key in ("admins", "operators"):
        names = section.get(key, [])
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise SettingsError(f"{where}: {key} {names!r}: a list of user names")
        lists[key] = frozenset(names)
    socket_path = section.get("socket")
    if socket_path is not None and (not isinstance(socket_path, str) or not socket_path.startswith("/")):
        raise SettingsError(f"{where}: socket {socket_path!r}: an absolute path")
    ttl = section.get("credential_ttl_s", DEFAULT_CREDENTIAL_TTL_S)
    if isinstance(ttl, bool) or not isinstance(ttl, int) or not 10 <= ttl <= 86400:
        raise SettingsError(f"{where}: credential_ttl_s {ttl!r}: whole seconds, 10..86400")
    flags = {}
    for key in ("agents_vouch_for_admins", "public_metrics"):
        flags[key] = section.get(key, False)
        if not isinstance(flags[key], bool):
            raise SettingsError(f"{where}: {key} {flags[key]!r}: true or false")
    min_uid = section.get("agents_vouch_min_uid", DEFAULT_VOUCH_MIN_UID)
    if isinstance(min_uid, bool) or not isinstance(min_uid, int) or not 1 <= min_uid < 2**32:
        raise SettingsError(f"{where}: agents_vouch_min_uid {min_uid!r}: a uid, 1..4294967295 (root's uid 0 "
                            "is agents_vouch_for_admins' to allow)")
    return AuthSettings(admins=lists["admins"], operators=lists["operators"], socket=socket_path,
                        credential_ttl_s=ttl, agents_vouch_min_uid=min_uid, **flags)


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
    sched = dict(data.get("scheduler", {}))
    _only(sched, _SCHED, f"{origin} [scheduler]")
    _placement(sched, f"{origin} [scheduler]")
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
    top = {k: data[k] for k in ("cluster_name", "kill_grace_s", "node_timeout_s", "kill_report_timeout_s",
                                "shards_per_gpu", "expedite_hold_s", "gpu_idle_cancel_s",
                                "gpu_idle_flag_s", "self_fencing", "min_cycle_interval_s")
           if k in data}
    if "launch_parameters" in data:
        parameters = data["launch_parameters"]
        if not isinstance(parameters, list) or not all(isinstance(p, str) for p in parameters):
            raise SettingsError(f"{origin}: launch_parameters must be a list of strings, such as "
                                f"[\"use_interactive_step\"], not {parameters!r}")
        top["launch_parameters"] = tuple(parameters)
    try:
        return EngineConfig(partitions=tuple(partitions), scheduler=SchedulerConfig(**sched), **top)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{origin}: {exc}") from None


def _placement(sched: dict, where: str) -> None:
    """Check the placement keys and turn `task_mix` into the core's (TaskShape, weight) pairs, in place."""
    placement = sched.get("placement", "bestfit")
    if placement not in PLACEMENTS:
        raise SettingsError(f"{where}: placement {placement!r}: one of {', '.join(PLACEMENTS)}")
    weight = sched.get("fgd_cpu_weight", 0)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
        raise SettingsError(f"{where}: fgd_cpu_weight {weight!r}: a number >= 0")
    if "fgd_cpu_weight" in sched and placement != "fgd+cpu":
        raise SettingsError(f"{where}: fgd_cpu_weight is for placement \"fgd+cpu\", not {placement!r}")
    mix = sched.get("task_mix")
    if placement == "bestfit":
        if mix is not None:
            raise SettingsError(f"{where}: task_mix is for placement \"fgd\" or \"fgd+cpu\", not \"bestfit\"")
        return
    if not isinstance(mix, list) or not mix:
        raise SettingsError(f"{where}: placement {placement!r} needs task_mix, a list of typical tasks "
                            f"such as [{{gpus = 1, cpus = 4, weight = 3}}, {{gpus = 8, cpus = 64}}]")
    sched["task_mix"] = tuple(_task(task, f"{where} task_mix[{i}]") for i, task in enumerate(mix))


def _task(task: object, where: str) -> tuple[TaskShape, float]:
    if not isinstance(task, dict):
        raise SettingsError(f"{where}: a table such as {{gpus = 1, cpus = 4, weight = 3}}")
    _only(task, _TASK, where)
    if "gpus" not in task:
        raise SettingsError(f"{where}: gpus is required")
    values = {"gpus": task["gpus"], "gpu_milli": task.get("gpu_milli", GPU_MILLI), "cpus": task.get("cpus", 0)}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SettingsError(f"{where}: {key} {value!r}: a whole number >= 0")
    if values["gpus"] < 1:
        raise SettingsError(f"{where}: gpus 0: a typical task uses GPUs (CPU-only tasks never change a choice)")
    if not 1 <= values["gpu_milli"] <= GPU_MILLI or (values["gpu_milli"] < GPU_MILLI and values["gpus"] != 1):
        raise SettingsError(f"{where}: gpu_milli {values['gpu_milli']}: 1..1000, and below 1000 only with gpus = 1")
    model, weight = task.get("gpu_model", ""), task.get("weight", 1)
    if not isinstance(model, str):
        raise SettingsError(f"{where}: gpu_model {model!r}: a GPU model name")
    if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
        raise SettingsError(f"{where}: weight {weight!r}: a number > 0")
    return TaskShape(values["gpus"], values["gpu_milli"], values["cpus"], model), float(weight)


def _only(section: dict, allowed: set[str], where: str) -> None:
    unknown = set(section) - allowed
    if unknown:
        raise SettingsError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
