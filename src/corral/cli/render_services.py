"""Services as `corral service list|show` print them: rows and lines from the API's JSON (ServiceOut),
no I/O here."""
from __future__ import annotations

LIST_HEADERS = ("NAME", "USER", "ACCOUNT", "READY", "REVISION", "PORTS", "REASON")
REPLICA_HEADERS = ("REPLICA", "JOB", "REV", "NODE", "STATE", "READY", "RESTARTS", "PROBES", "ENDPOINTS")
LIST_RIGHT = frozenset({4})
REPLICA_RIGHT = frozenset({1, 2, 6})
REPLICA_STATE_COLUMN = 4


def service_rows(services: list[dict]) -> list[list[str]]:
    return [[s["name"], s["user"], s["account"] or "-", f"{s['ready_replicas']}/{s['desired_replicas']}",
             str(s["revision"]), ports_text(s["spec"]), s.get("reason") or ""] for s in services]


def ports_text(spec: dict) -> str:
    """`http:any,metrics:9100`: each port's name and number (any: chosen free on the replica's node)."""
    return ",".join(f"{p['name']}:{p.get('port') or 'any'}" for p in spec.get("ports", [])) or "-"


def replica_rows(service: dict) -> list[list[str]]:
    return [[str(r["index"]), str(r["job_id"]) if r.get("job_id") is not None else "-", str(r["revision"]),
             r["node"] or "-", r["state"], "yes" if r["ready"] else "no", str(r["restarts"]), probes_text(r),
             endpoints_text(r)] for r in service["replicas"]]


def probes_text(replica: dict) -> str:
    """`readiness ok, liveness failed x3 (HTTP 500)`; `-` before any probe reported."""
    parts = []
    for probe in replica.get("probes", []):
        text = f"{probe['kind']} {'ok' if probe['ok'] else 'failed'}"
        if not probe["ok"] and probe.get("consecutive"):
            text += f" x{probe['consecutive']}"
        if not probe["ok"] and probe.get("detail"):
            text += f" ({probe['detail']})"
        parts.append(text)
    return ", ".join(parts) or "-"


def endpoints_text(replica: dict) -> str:
    return ",".join(f"{name}={where}" for name, where in sorted(replica.get("endpoints", {}).items())) or "-"


def service_summary(service: dict) -> list[str]:
    """The lines above the replica table of `corral service show`."""
    spec = service["spec"]
    what = " ".join(spec["command"]) if spec.get("command") else "(script)"
    resources = f"{spec.get('nodes', 1)} node(s) x {spec.get('gpus_per_node', 0)} GPU(s), " \
                f"{spec.get('cpus_per_task', 1)} CPU(s)"
    lines = [
        f"Service {service['name']}  user {service['user']}  account {service['account'] or '-'}  "
        f"revision {service['revision']}",
        f"Replicas: {service['ready_replicas']} ready of {service['desired_replicas']} desired"
        + (f"  ({service['reason']})" if service.get("reason") else ""),
        f"Command: {what}",
        f"Per replica: {resources}",
        f"Ports: {ports_text(spec)}" + ("  (public: no credential at the gateway)" if spec.get("public") else ""),
    ]
    scale = spec.get("autoscale")
    if scale:
        target = (f"{scale['target_inflight']:g} in-flight" if scale.get("target_inflight") is not None
                  else f"{scale['target_rps']:g} requests/s")
        lines.append(f"Autoscale: {scale.get('min_replicas', 1)} to {scale['max_replicas']} replicas at {target} "
                     "per replica" + (f", to zero after {scale.get('idle_s', 300):g} s idle"
                                      if scale.get("scale_to_zero") else ""))
    return lines


def parse_service_ref(text: str) -> tuple[str, int | None]:
    """`web` -> ("web", None); `web/2` -> ("web", 2). ValueError names what is wrong."""
    name, slash, replica = text.partition("/")
    if not name:
        raise ValueError(f"{text!r} names no service: give NAME or NAME/REPLICA")
    if not slash:
        return name, None
    if not (replica.isascii() and replica.isdigit()):
        raise ValueError(f"{text!r}: the replica after '/' must be its index (0, 1, ...), not {replica!r}")
    return name, int(replica)
