"""The PostgreSQL server `corral up --controllers N` (N > 1) starts for its controllers to share: started
before them and stopped after them by the project's own script (postgres_server.sh, beside this file),
which installs PostgreSQL where it is missing and we are root. Its data stays across runs, as SQLite's
does for one controller."""
from __future__ import annotations

import glob
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from corral.cli.errors import CliError

SCRIPT = Path(__file__).with_name("postgres_server.sh")
START_TIMEOUT_S = 900.0  # a first start may apt-get install postgresql
STOP_TIMEOUT_S = 120.0
INITDB_GLOB = "/usr/lib/postgresql/*/bin/initdb"


@dataclass(frozen=True, slots=True)
class PostgresPlan:
    data_dir: Path
    port: int
    user: str  # the database superuser: the user running `corral up` (peer authentication)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{self.user}@/corral?host={self.data_dir}&port={self.port}"


def postgres_data_dir(state_dir: Path, port: int, euid: int, cluster_id: str | None = None) -> Path:
    """Root's server runs as 'postgres', which cannot enter root's private state dir: a directory of its own,
    one per cluster (by its id, as root's spools; by port for a cluster without one)."""
    if euid != 0:
        return state_dir / "postgresql"
    return Path("/var/lib/corral") / (f"cluster-{cluster_id}" if cluster_id else str(port)) / "postgresql"


def check_can_start(euid: int = os.geteuid()) -> None:
    """CliError unless the script can start a server: PostgreSQL installed, or root (who may install it)."""
    if glob.glob(INITDB_GLOB) or euid == 0:
        return
    raise CliError("more than one controller needs PostgreSQL, which is not installed here (no "
                   f"{INITDB_GLOB}) and only root may install it: install the 'postgresql' package, or give "
                   "--db postgresql+psycopg://USER@HOST/DB to use a server you run")


def start_postgres(plan: PostgresPlan) -> str:
    """Start the server (or keep the one running) and return its database URL."""
    if os.geteuid() == 0:
        plan.data_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o755)  # 'postgres' must get through
    else:
        plan.data_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    result = _script("start", str(plan.data_dir), str(plan.port), timeout_s=START_TIMEOUT_S)
    return result.stdout.strip().splitlines()[-1]


def stop_postgres(plan: PostgresPlan) -> None:
    _script("stop", str(plan.data_dir), timeout_s=STOP_TIMEOUT_S)


def _script(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout_s,
                                check=False)
    except subprocess.TimeoutExpired:
        raise CliError(f"PostgreSQL did not {args[0]} within {timeout_s:g} s ({SCRIPT} {' '.join(args)})") from None
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-10:])
        raise CliError(f"could not {args[0]} PostgreSQL ({SCRIPT} {' '.join(args)}, exit status "
                       f"{result.returncode}):\n{tail}")
    return result
