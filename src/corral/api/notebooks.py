"""What a notebook asks for, as data: the session service's spec (api/services.py, `session = true`)
around a JupyterLab command. Pure, so its tests need no cluster. Both `corral notebook` and the dashboard's
"Start a notebook" form (through `POST /api/v1/notebooks/spec`, which only builds the spec) use it, and both
then apply the spec as any service (`POST /api/v1/services`): one path, the same roles.

The command is a small POSIX shell wrapper, run on the node as the user:
- `jupyter` missing from the PATH the user submitted with: one clear line, exit 127 (the session ends, and
  `corral notebook` prints that line);
- JupyterLab behind the gateway: its base URL is the session's gateway path, it listens on the port the
  agent chose (`$CORRAL_PORT_HTTP`) on every address, and its token is the session's secret, which the
  controller gives the job (`$CORRAL_SESSION_SECRET`) and the gateway sends upstream in place of the
  user's credential: the gateway lets only the session's owner in (gateway/server.py), and whoever reaches
  the port on the node without the gateway is refused; without the secret it does not start;
- idle stop: the spec's `idle_timeout_s`; the controller asks JupyterLab's own REST API about its kernels
  and reads the agents' GPU samples, and stops the session when both have been idle that long
  (controller/session_idle.py). Jupyter's own culling stays off: it would kill a kernel whose background
  thread keeps the GPU busy;
- JupyterLab's pages do not carry its token (it would reach the browser): a page config of its own, in a
  temporary directory first on JUPYTER_CONFIG_PATH, leaves it empty;
- on SIGTERM (its time limit, a preemption, a cancel) a warning line in the notebook's log, then JupyterLab
  is stopped with the same signal."""
from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from corral.api.fields import Amount, Count, Name, WorkDir
from corral.api.services import ServiceName, field_problem
from corral.jobscript.units import parse_time_s

# What of the submitting shell's environment reaches the notebook: enough to find the user's own Jupyter
# and Python (a virtual environment, a conda environment), nothing else (the job's own variables follow).
CARRIED_ENV = ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH", "JUPYTER_PATH",
               "JUPYTER_CONFIG_DIR", "LANG")
PORT = "http"
READY_PATH = "api"  # answers once the server is up (no credential: Jupyter's own auth is off)


def gateway_path(name: str) -> str:
    return f"/s/{name}/"


def jupyter_command(name: str, jupyter: str) -> list[str]:
    """The replica's command line: the wrapper above, `jupyter` being the command to look for."""
    options = [
        "lab", "--no-browser", "--ip=0.0.0.0", '--port="$CORRAL_PORT_HTTP"',
        f"--ServerApp.base_url={gateway_path(name)}", "--ServerApp.allow_remote_access=True",
        '--IdentityProvider.token="$CORRAL_SESSION_SECRET"', "--ServerApp.password=", "--ServerApp.open_browser=False",
        "--ServerApp.allow_root=True",  # an agent that runs tasks as itself (tests, a personal cluster)
    ]
    quoted = shlex.quote(jupyter)
    args = " ".join(o if '"$' in o else shlex.quote(o) for o in options)
    script = (
        f"if ! command -v {quoted} >/dev/null 2>&1; then\n"
        # The name as data (printf's argument), never as shell text inside the message.
        "  printf 'corral notebook: %s is not found on %s (PATH=%s): install JupyterLab in the environment you "
        "run corral notebook from (pip install jupyterlab), or give its path (--jupyter, or the dashboard'\\''s "
        f"Jupyter field)\\n' {quoted} \"$(hostname)\" \"$PATH\" >&2\n"
        "  exit 127\nfi\n"
        'if [ -z "$CORRAL_SESSION_SECRET" ]; then\n'
        '  echo "corral notebook: no session secret from the controller: JupyterLab would answer anyone" >&2\n'
        "  exit 1\nfi\n"
        # JupyterLab writes its token into every page it serves, for its scripts to send back: that would hand
        # the session's secret to the browser, whose `Authorization: token` the gateway then takes for a
        # corral credential. A page config of higher priority (Jupyter's config path) leaves it empty, so the
        # pages' calls carry the gateway's cookie only.
        'labconfig=$(mktemp -d) || exit 1\n'
        'mkdir "$labconfig/labconfig" && echo \'{"token": ""}\' > "$labconfig/labconfig/page_config.json" || exit 1\n'
        'export JUPYTER_CONFIG_PATH="$labconfig${JUPYTER_CONFIG_PATH:+:$JUPYTER_CONFIG_PATH}"\n'
        f"{quoted} {args} &\n"
        "server=$!\n"
        "trap 'echo \"corral notebook: WARNING: this session is being stopped now (its time limit, a preemption "
        "or a cancel: corral show $CORRAL_JOB_ID says which); unsaved work is lost\" >&2; "
        "kill -TERM $server 2>/dev/null' TERM INT\n"
        "wait $server\nstatus=$?\n"
        "wait $server 2>/dev/null\n"
        'rm -rf "$labconfig"\n'
        "exit $status\n"
    )
    return ["/bin/sh", "-c", script]


def gres_request(text: str) -> tuple[int, str | None]:
    """`--gres` as (whole GPUs, share): 'gpu:N' is N GPUs; 'shard:N' and 'mps:P' a share of one."""
    kind, _, count = text.strip().partition(":")
    if kind in ("gpu", "shard", "mps") and count.isdigit() and int(count) > 0:
        return (int(count), None) if kind == "gpu" else (1, f"{kind}:{int(count)}")
    raise ValueError(f"invalid --gres {text!r}: give gpu:N, shard:N or mps:P (N, P > 0)")


def session_spec(*, name: str, workdir: str, time_limit_s: int, gpus: int, jupyter: str = "jupyter",
                 gpu_share: str | None = None,
                 idle_s: int | None = None, cpus: int = 1, mem_mib: int | None = None,
                 partition: str | None = None, account: str | None = None, qos: str | None = None,
                 environ: Mapping[str, str] | None = None) -> dict:
    """The body of `POST /api/v1/services` for one notebook session."""
    env = {key: environ[key] for key in CARRIED_ENV if environ and environ.get(key)}
    spec: dict = {
        "name": name, "session": True, "command": jupyter_command(name, jupyter), "workdir": workdir,
        "env": env, "gpus_per_node": gpus, "cpus_per_task": cpus, "time_limit_s": time_limit_s,
        "ports": [{"name": PORT}],
        "probes": {"readiness": {"http": {"path": gateway_path(name) + READY_PATH, "port": PORT},
                                 "period_s": 1, "failure_threshold": 1}},
    }
    optional = {"mem_per_node_mib": mem_mib, "partition": partition, "account": account, "qos": qos,
                "gpu_share": gpu_share, "idle_timeout_s": idle_s}
    spec.update({key: value for key, value in optional.items() if value is not None})
    return spec


def user_label(user: str) -> str:
    """USER made part of a DNS label (a session's name is its gateway path)."""
    cleaned = re.sub(r"-+", "-", "".join(c if c.isalnum() and c.isascii() else "-" for c in user.lower())).strip("-")
    return cleaned[:40].strip("-") or "user"


def default_name(user: str, suffix: str) -> str:
    """nb-USER-SUFFIX."""
    return f"nb-{user_label(user)}-{suffix}"


def gpus_and_share(gpus: int, gres: str | None) -> tuple[int, str | None]:
    """What --gpus and --gres ask for together (ValueError when both are given, or --gres is not a GPU's)."""
    if gres is None:
        return gpus, None
    if gpus:
        raise ValueError("give gpus or gres, not both")
    return gres_request(gres)


JupyterCommand = Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^[^\x00-\x1f]+$", description=(
    "The command that starts JupyterLab on the node (found on the node's PATH, or an absolute path)"))]


class NotebookRequest(BaseModel):
    """What the dashboard's form sends to have a notebook's spec built: `corral notebook`'s options. Times in
    Slurm's forms (4:00:00, 30:00, 1-00:00:00)."""

    model_config = ConfigDict(extra="forbid")

    name: ServiceName | None = Field(None, description="Its name and gateway path /s/NAME/; none: nb-USER-XXXX")
    gpus: Amount = 0
    gres: str | None = Field(None, description="gpu:N (as gpus), or a share of one GPU: shard:N, mps:P")
    time: str = Field("4:00:00", max_length=32, description="Its time limit, Slurm's forms")
    idle_timeout: str | None = Field(None, max_length=32, description=(
        "Stop it once its kernels and GPUs have been idle this long (Slurm's forms); none: only the time limit"))
    cpus: Count = 1
    partition: Name | None = None
    account: Name | None = None
    qos: Name | None = None
    jupyter: JupyterCommand = "jupyter"
    workdir: WorkDir = Field(description="Where it starts (its log goes there): an absolute directory on the nodes")

    @field_validator("time", "idle_timeout")
    @classmethod
    def _slurm_time(cls, value: str | None) -> str | None:
        if value is not None:
            parse_time_s(value)  # DirectiveError (a ValueError) says what is wrong, naming the value
        return value

    @field_validator("gres")
    @classmethod
    def _gres(cls, value: str | None) -> str | None:
        if value is not None:
            gres_request(value)
        return value

    @model_validator(mode="after")
    def _gpus_or_gres(self) -> Self:
        if self.gpus and self.gres is not None:
            raise field_problem("gres", "give gpus or gres, not both")
        return self


def requested_spec(request: NotebookRequest, user: str, suffix: str) -> dict:
    """The session service's spec for a NotebookRequest of `user` (`suffix`: the default name's random part)."""
    gpus, share = gpus_and_share(request.gpus, request.gres)
    return session_spec(name=request.name or default_name(user, suffix), workdir=request.workdir,
                        time_limit_s=parse_time_s(request.time), gpus=gpus, jupyter=request.jupyter,
                        gpu_share=share,
                        idle_s=parse_time_s(request.idle_timeout) if request.idle_timeout is not None else None,
                        cpus=request.cpus, partition=request.partition, account=request.account, qos=request.qos)


# How long the link's credential outlives the session's time limit (an API token: `corral token list`).
LINK_SLACK_S = 3600


class NotebookPlan(BaseModel):
    """What `POST /api/v1/notebooks/spec` answers: the spec to apply (`POST /api/v1/services`), and what the
    link's credential (`POST /api/v1/tokens`) and the link need."""

    name: str
    spec: dict
    token: dict = Field(description="The body of the link's token request: it expires an hour after the time limit")
    lab_path: str = Field(description="The link's path on the gateway; the token goes in ?corral_token=")


def plan(request: NotebookRequest, user: str, suffix: str) -> NotebookPlan:
    spec = requested_spec(request, user, suffix)
    return NotebookPlan(name=spec["name"], spec=spec, lab_path=f"{gateway_path(spec['name'])}lab",
                        token={"expires_s": spec["time_limit_s"] + LINK_SLACK_S,
                               "description": f"notebook {spec['name']}"})
