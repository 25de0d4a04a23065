"""`corral up --controllers N`: N controllers on consecutive ports sharing a PostgreSQL server started for
them, agents and cluster.json knowing every URL. The plan, and starting it with stand-in children
(tests/cli/fake_cluster.py, as test_up.py does); a slow test starts the real thing."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from corral.cli import up_postgres
from corral.cli.errors import CliError
from corral.cli.hostinfo import HostFacts
from corral.cli.supervisor import Supervisor
from corral.cli.up import Cluster, start_cluster, write_agent_credentials, write_secret
from corral.cli.up_plan import UpOptions, plan_up
from corral.cli.up_postgres import postgres_data_dir

from .test_up import fake_plan

NO_GPUS = HostFacts(cpus=8, mem_mib=64000, nvml_gpus=None)
ROOT = os.geteuid() == 0


def option(argv, name):
    return argv[argv.index(name) + 1]


def test_two_controllers_on_consecutive_ports_share_a_postgresql_started_for_them(tmp_path):
    plan = plan_up(UpOptions(state_dir=tmp_path, port=7000, controllers=2), NO_GPUS, python="py")
    assert plan.urls == ("http://127.0.0.1:7000", "http://127.0.0.1:7001") and plan.url == plan.urls[0]
    assert plan.controller_names == ("controller1", "controller2")
    assert plan.ports == (7000, 7001)  # PostgreSQL listens on no TCP port: 7002 names its socket
    data_dir = Path("/var/lib/corral/7000/postgresql") if ROOT else tmp_path / "postgresql"
    assert plan.postgres is not None and (plan.postgres.data_dir, plan.postgres.port) == (data_dir, 7002)
    db_url = f"postgresql+psycopg://{plan.postgres.user}@/corral?host={data_dir}&port=7002"
    sockets = []
    for argv, port in zip(plan.controller_argvs, (7000, 7001), strict=True):
        assert (option(argv, "--listen"), option(argv, "--db")) == (f"127.0.0.1:{port}", db_url)
        assert option(argv, "--advertise-url") == f"http://127.0.0.1:{port}"
        sockets.append(option(argv, "--auth-socket"))
    assert len(set(sockets)) == 2 and plan.auth_socket == Path(sockets[0])  # cluster.json names the first's
    for argv in plan.agent_argvs:
        assert option(argv, "--controller") == "http://127.0.0.1:7000,http://127.0.0.1:7001"


def test_one_controller_is_planned_as_before(tmp_path):
    plan = plan_up(UpOptions(state_dir=tmp_path, port=7000), NO_GPUS, python="py")
    assert plan.urls == ("http://127.0.0.1:7000",) and plan.controller_names == ("controller",)
    assert plan.postgres is None and plan.ports == (7000,)
    assert "--advertise-url" not in plan.controller_argv
    assert option(plan.controller_argv, "--db") == f"sqlite:///{tmp_path / 'corral.db'}"


def test_a_postgresql_database_given_is_shared_and_none_is_started(tmp_path):
    options = UpOptions(state_dir=tmp_path, port=7000, controllers=3, db_url="postgresql+psycopg://db/corral",
                        tls=True)
    plan = plan_up(options, NO_GPUS, python="py")
    assert plan.postgres is None and plan.ports == (7000, 7001, 7002)
    assert [option(a, "--db") for a in plan.controller_argvs] == ["postgresql+psycopg://db/corral"] * 3
    assert [option(a, "--advertise-url") for a in plan.controller_argvs] == [
        "https://127.0.0.1:7000", "https://127.0.0.1:7001", "https://127.0.0.1:7002"]


@pytest.mark.parametrize(("options", "message"), [
    (dict(controllers=0), "--controllers 0: a cluster needs at least one controller"),
    (dict(controllers=-2), "--controllers -2: a cluster needs at least one controller"),
    (dict(controllers=2, db_url="sqlite:////tmp/x.db"), "--db must be a PostgreSQL URL"),
    (dict(controllers=2, port=65534), "would need ports up to 65536: choose a lower --port"),
    (dict(controllers=3, port=65534, db_url="postgresql://db/c"), "would need ports up to 65536"),
])
def test_impossible_controller_counts_are_refused(tmp_path, options, message):
    with pytest.raises(CliError) as caught:
        plan_up(UpOptions(state_dir=tmp_path, **options), NO_GPUS)
    assert message in str(caught.value)


def test_without_postgresql_and_the_right_to_install_it_the_error_says_what_to_do(monkeypatch):
    monkeypatch.setattr(up_postgres, "INITDB_GLOB", "/nonexistent/*/bin/initdb")
    with pytest.raises(CliError) as caught:
        up_postgres.check_can_start(euid=1000)
    assert "install the 'postgresql' package, or give --db postgresql+psycopg://" in str(caught.value)
    up_postgres.check_can_start(euid=0)  # root: the script installs it


def test_the_up_command_refuses_zero_controllers_before_starting_anything(isolated, cli):
    result = cli("up", "--controllers", "0", "--gpus-per-node", "1", "--state-dir", str(isolated / "s"))
    assert result.exit_code == 1
    assert result.stderr == "corral: error: --controllers 0: a cluster needs at least one controller\n"
    assert not (isolated / "s").exists()


def test_root_keeps_the_postgresql_data_where_postgres_may_enter(tmp_path):
    assert postgres_data_dir(tmp_path, 6817, 0) == Path("/var/lib/corral/6817/postgresql")
    assert postgres_data_dir(tmp_path, 6817, 1000) == tmp_path / "postgresql"
    assert postgres_data_dir(tmp_path, 6817, 0, "5eed") == Path("/var/lib/corral/cluster-5eed/postgresql")
    assert postgres_data_dir(tmp_path, 6817, 1000, "5eed") == tmp_path / "postgresql"


def test_start_and_stop_two_controllers(tmp_path, monkeypatch):
    """Both stand-in controllers are started and must answer; the agents get both URLs; all stop."""
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("FAKE_CLUSTER_RECORD", str(record))
    plan = fake_plan(tmp_path, controllers=2)
    write_secret(plan.secret_file)
    write_agent_credentials(plan)
    cluster = Cluster(plan, Supervisor(plan.log_dir))
    try:
        start_cluster(cluster, timeout_s=30)
        assert [c.name for c in cluster.supervisor.children] == ["controller1", "controller2", "node1", "node2"]
        started = [json.loads(line) for line in record.read_text().splitlines()]
        assert sorted(option(r["argv"], "--advertise-url") for r in started if r["role"] == "controller") == \
            list(plan.urls)
    finally:
        cluster.stop(grace_s=5)
    assert all(c.process.poll() is not None for c in cluster.supervisor.children)
