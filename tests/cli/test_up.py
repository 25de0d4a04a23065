import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from corral.agent.task_spool import TaskSpool
from corral.cli.errors import CliError
from corral.cli.hostinfo import HostFacts
from corral.cli.supervisor import ChildExited, Supervisor
from corral.cli.up import (
    Cluster,
    banner,
    check_port_free,
    start_cluster,
    state_dir_lock,
    write_agent_credentials,
    write_secret,
)
from corral.cli.up_identity import Recorded, cluster_identity, keep_cluster_id
from corral.cli.up_plan import UpOptions, client_url, image_cache_dir, plan_up
from corral.cli.up_stop import kill_leftover_tasks, stop_summary

FAKE = str(Path(__file__).with_name("fake_cluster.py"))
NO_GPUS = HostFacts(cpus=8, mem_mib=64000, nvml_gpus=None)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fake_plan(tmp_path, nodes=2, controller=None, controllers=1, gateway=False):
    """A real plan whose children are the stand-ins of fake_cluster.py (and, with `gateway`, the real gateway)."""
    options = UpOptions(state_dir=tmp_path / "state", nodes=nodes, port=free_port(), controllers=controllers,
                        gateway=gateway, gateway_port=free_port() if gateway else None)
    plan = plan_up(options, NO_GPUS)
    swap = lambda argv, role: (sys.executable, FAKE, role, *argv[3:])  # noqa: E731 - drop "-m corral.x"
    plan.state_dir.mkdir(parents=True, exist_ok=True)
    return dataclasses.replace(
        plan,
        controller_argvs=(controller,) if controller else tuple(swap(a, "controller") for a in plan.controller_argvs),
        agent_argvs=tuple(swap(a, "agent") for a in plan.agent_argvs),
    )


def test_the_banner_names_the_dashboard(tmp_path):
    plan = plan_up(UpOptions(state_dir=tmp_path), NO_GPUS, python="py")
    text = banner(SimpleNamespace(plan=plan, name="lab", isolation=""), Recorded(tmp_path / "cluster.json"))
    assert ("  dashboard: http://127.0.0.1:6817/ in a browser (sign in with a token from 'corral token create')\n"
            in text)


def test_plan_simulated_defaults(tmp_path):
    plan = plan_up(UpOptions(state_dir=tmp_path), NO_GPUS, python="py")
    assert plan.node_names == ("node1", "node2") and plan.gpus_per_node == 4
    assert plan.url == "http://127.0.0.1:6817"
    assert plan.controller_argv == (
        "py", "-m", "corral.controller", "--listen", "127.0.0.1:6817", "--db", f"sqlite:///{tmp_path}/corral.db",
        "--secret-file", str(tmp_path / "secret"), "--state-dir", str(tmp_path),
        "--auth-socket", "/run/corral/6817/auth.sock" if os.geteuid() == 0 else str(tmp_path / "auth.sock"),
        "--gateway-url", "http://127.0.0.1:6820")  # the gateway it starts: the dashboard's notebook links
    # Each agent gets its own node's credential, never the cluster secret.
    assert plan.agent_argvs[1] == (
        "py", "-m", "corral.agent", "--controller", "http://127.0.0.1:6817",
        "--secret-file", str(tmp_path / "agents" / "node2.credential"),
        "--node", "node2", "--image-cache", str(image_cache_dir(tmp_path, 6817, os.geteuid())),
        "--cpus", "16", "--mem-mib", "32000", "--spool", str(spool(tmp_path, 6817, "node2")),
        "--kill-tasks-on-exit", "--allow-root-jobs", "--gpus", "4")
    assert plan.spool_dirs == (spool(tmp_path, 6817, "node1"), spool(tmp_path, 6817, "node2"))


def test_plan_gives_the_agents_the_clusters_id_for_their_cgroups_and_spools(tmp_path):
    plan = plan_up(UpOptions(state_dir=tmp_path, cluster_id="5eed1d"), NO_GPUS, python="py")
    for argv in (*plan.agent_argvs, plan.controller_argv):  # the controller tells machines that join it
        assert argv[argv.index("--cluster-id") + 1] == "5eed1d"
    node1 = Path("/var/spool/corral/cluster-5eed1d/node1") if os.geteuid() == 0 else tmp_path / "spool" / "node1"
    assert plan.spool_dirs[0] == node1 and plan.cluster_id == "5eed1d"


def test_a_clusters_agents_share_one_image_cache_which_no_other_cluster_uses(tmp_path):
    """Issue 25: the nodes of one cluster share its image cache (an image is imported once per host); two
    clusters on one host never share one (their leases and evictions would collide). Root's is beside its
    spools, which the jobs' users may traverse (runc runs as the user on the image's root), not in the 0700
    state dir; another user's in its state dir."""
    def caches(plan):
        return {argv[argv.index("--image-cache") + 1] for argv in plan.agent_argvs}

    one = plan_up(UpOptions(state_dir=tmp_path / "a", cluster_id="5eed1d"), NO_GPUS, python="py")
    other = plan_up(UpOptions(state_dir=tmp_path / "b", cluster_id="0ther1", port=6900), NO_GPUS, python="py")
    [first], [second] = caches(one), caches(other)
    assert first != second
    if os.geteuid() == 0:
        assert first == "/var/spool/corral/cluster-5eed1d/images"
        assert Path(first).parent == one.spool_dirs[0].parent, "beside the cluster's spools"
    else:
        assert Path(first).is_relative_to(tmp_path / "a")


def test_a_cluster_id_is_made_once_per_state_dir_and_kept(tmp_path):
    state = tmp_path / "state"
    plan = plan_up(UpOptions(state_dir=state, cluster_id=cluster_identity(state)), NO_GPUS, python="py")
    assert not state.exists(), "nothing is written before the cluster starts"
    state.mkdir()
    keep_cluster_id(plan)
    assert (state / "cluster-id").read_text() == f"{plan.cluster_id}\n"
    assert cluster_identity(state) == plan.cluster_id != cluster_identity(tmp_path / "other")
    with pytest.raises(CliError, match="cluster-id changed while 'corral up' started"):
        keep_cluster_id(dataclasses.replace(plan, cluster_id="0ther"))
    (state / "cluster-id").write_text("../etc\n")
    with pytest.raises(CliError, match="cluster-id: cluster id '../etc' is not 1 to 32 lower-case letters"):
        cluster_identity(state)


def test_plan_options(tmp_path):
    options = UpOptions(state_dir=tmp_path, nodes=3, gpus_per_node=0, host="0.0.0.0", port=7000,
                        db_url="postgresql://db/corral", config=Path("/etc/corral.toml"))
    plan = plan_up(options, HostFacts(cpus=1, mem_mib=3000, nvml_gpus=8), python="py")
    assert plan.url == "http://127.0.0.1:7000" and plan.gpus_per_node == 0  # given G wins over NVML
    assert plan.controller_argv[4:7] == ("0.0.0.0:7000", "--db", "postgresql://db/corral")
    assert plan.controller_argv[-4:] == ("--config", "/etc/corral.toml", "--gateway-url", "http://127.0.0.1:7003")
    assert plan.agent_argvs[0][-10:] == ("--cpus", "2", "--mem-mib", "1000", "--spool",
                                         str(spool(tmp_path, 7000, "node1")), "--kill-tasks-on-exit",
                                         "--allow-root-jobs", "--gpus", "0")


def test_plan_gives_every_agent_the_health_check(tmp_path):
    from corral.agent.__main__ import build_parser, health_config

    program = tmp_path / "check.sh"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    options = UpOptions(state_dir=tmp_path, nodes=2, gpus_per_node=1, health_program=program, health_interval_s=30,
                        health_before_job=True)
    plan = plan_up(options, NO_GPUS, python="py")
    for argv in plan.agent_argvs:
        assert argv[-5:] == ("--health-program", str(program), "--health-interval", "30", "--health-before-job")
        # The agent takes them as given (argv[3:]: past "py -m corral.agent").
        health = health_config(build_parser().parse_args(list(argv[3:])))
        assert (health.program, health.interval_s, health.before_job) == (program, 30.0, True)
    assert plan.health_check == f"{program} when each agent starts and every 30 s, and before each job; a failure " \
                               "drains the node"
    assert f"  health:    {plan.health_check}\n" in banner(SimpleNamespace(plan=plan, name="lab", isolation=""),
                                                                   Recorded(tmp_path / "c.json"))
    once = plan_up(dataclasses.replace(options, health_interval_s=0, health_before_job=False), NO_GPUS, python="py")
    assert once.health_check == f"{program} when each agent starts; a failure drains the node"
    plain = plan_up(UpOptions(state_dir=tmp_path, gpus_per_node=1), NO_GPUS, python="py")
    assert not any("--health-program" in argv for argv in plain.agent_argvs) and plain.health_check is None


def test_plan_refuses_health_options_without_a_usable_program(tmp_path):
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\n")
    for options, why in ((UpOptions(state_dir=tmp_path, health_program=script), "not an executable file"),
                         (UpOptions(state_dir=tmp_path, health_program=tmp_path / "missing"), "not an executable file"),
                         (UpOptions(state_dir=tmp_path, health_interval_s=60), "need --health-program"),
                         (UpOptions(state_dir=tmp_path, health_before_job=True), "need --health-program")):
        with pytest.raises(CliError, match=why):
            plan_up(options, NO_GPUS, python="py")


def test_up_command_refuses_a_health_interval_without_a_program(isolated, cli):
    result = cli("up", "--health-interval", "60", "--gpus-per-node", "1", "--state-dir", str(isolated / "s"))
    assert result.exit_code == 1
    assert result.stderr.startswith("corral: error: --health-interval and --health-before-job need --health-program")
    assert not (isolated / "s" / "secret").exists()  # nothing was started or written


def spool(state_dir: Path, port: int, node: str) -> Path:
    """Root's agents run jobs as their users, who must reach their batch scripts: a world-traversable spool."""
    return Path(f"/var/spool/corral/{port}/{node}") if os.geteuid() == 0 else state_dir / "spool" / node


def test_plan_real_gpus_one_node_without_gpus_option(tmp_path):
    plan = plan_up(UpOptions(state_dir=tmp_path), HostFacts(cpus=32, mem_mib=512000, nvml_gpus=8), python="py")
    assert plan.gpus_per_node is None and plan.node_names == ("node1",)
    assert "--gpus" not in plan.agent_argvs[0]
    with pytest.raises(CliError, match="every agent would claim all"):
        plan_up(UpOptions(state_dir=tmp_path, nodes=2), HostFacts(cpus=32, mem_mib=512000, nvml_gpus=8))


@pytest.mark.parametrize(("host", "url"), [("0.0.0.0", "http://127.0.0.1:1"), ("::", "http://[::1]:1"),
                                            ("10.0.0.5", "http://10.0.0.5:1"), ("fe80::1", "http://[fe80::1]:1")])
def test_client_url(host, url):
    assert client_url(host, 1) == url


def test_port_in_use_is_reported(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(CliError, match=f"cannot listen on 127.0.0.1:{port}: .*choose another --port"):
            check_port_free("127.0.0.1", port)


def test_up_command_port_in_use(isolated, cli):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli("up", "--port", str(port), "--gpus-per-node", "2", "--state-dir", str(isolated / "s"))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"corral: error: cannot listen on 127.0.0.1:{port}")
    assert not (isolated / "s" / "secret").exists()  # nothing was started or written


def test_up_command_missing_config_file(isolated, cli):
    for config, why in ((isolated / "missing.toml", "does not exist"), (isolated, "is a directory")):
        result = cli("up", "--config", str(config), "--state-dir", str(isolated / "s"))
        assert result.exit_code == 2
        assert f"Invalid value for '--config': file '{config}' {why}" in result.stderr
    assert not (isolated / "s").exists()  # refused before anything started


def test_one_up_per_state_dir(tmp_path):
    with state_dir_lock(tmp_path), pytest.raises(CliError, match="another 'corral up' is running"):
        with state_dir_lock(tmp_path):
            pass


def test_what_a_dead_agent_left_running_is_killed_and_said(tmp_path, capsys):
    plan = fake_plan(tmp_path)
    orphan = subprocess.Popen(["sleep", "30"], start_new_session=True, env={"PATH": os.environ["PATH"]})
    try:
        TaskSpool(plan.spool_dirs[1]).add(orphan.pid, 3, None, [0, 1])
        kill_leftover_tasks(plan)
        assert orphan.wait(timeout=1) == -signal.SIGTERM
    finally:
        orphan.kill()
        orphan.wait()
    assert capsys.readouterr().err == (f"corral: killed the leftover tasks of job 3 (process group {orphan.pid}, "
                                       "GPUs 0,1) on node2, whose agent was gone\n")
    assert TaskSpool(plan.spool_dirs[1]).records() == []


def test_secret_file_is_private(tmp_path):
    write_secret(tmp_path / "secret")
    assert (tmp_path / "secret").stat().st_mode & 0o777 == 0o600
    assert len((tmp_path / "secret").read_text().strip()) >= 32


@pytest.mark.parametrize(("report", "line"), [
    ({"requeued": [1, 2], "ended": [{"id": 3, "state": "NODE_FAIL"}], "unconfirmed": [], "pending": 3},
     "stopping: 2 running jobs requeued, 1 ended NODE_FAIL; 3 pending jobs stay queued; "
     "the next 'corral up' runs them"),
    ({"requeued": [], "ended": [{"id": 4, "state": "CANCELLED"}, {"id": 5, "state": "NODE_FAIL"}],
      "unconfirmed": [6], "pending": 0},
     "stopping: 1 ended CANCELLED, 1 ended NODE_FAIL, 1 not reported stopped in time (killed with the agents)"),
    ({"requeued": [], "ended": [], "unconfirmed": [], "pending": 1},
     "stopping: no running jobs; 1 pending job stays queued; the next 'corral up' runs them"),
])
def test_stop_summary(report, line):
    assert stop_summary(report) == line


def test_start_and_stop_cluster(tmp_path, monkeypatch):
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("FAKE_CLUSTER_RECORD", str(record))
    plan = fake_plan(tmp_path)
    write_secret(plan.secret_file)
    write_agent_credentials(plan)
    cluster = Cluster(plan, Supervisor(plan.log_dir))
    try:
        start_cluster(cluster, timeout_s=30)  # the fake controller takes each agent's own credential only
        assert cluster.name == "fake"
        assert [c.name for c in cluster.supervisor.children] == ["controller", "node1", "node2"]
        pids = [json.loads(line)["pid"] for line in record.read_text().splitlines()]
        assert len(pids) == 3
    finally:
        cluster.stop(grace_s=5)
    assert all(c.process.poll() is not None for c in cluster.supervisor.children)
    assert "agent stopped by SIGTERM" in (plan.log_dir / "node1.log").read_text()


def test_up_starts_the_gateway_after_the_nodes_and_stops_it_with_the_cluster(tmp_path):
    plan = fake_plan(tmp_path, gateway=True)
    write_secret(plan.secret_file)
    write_agent_credentials(plan)
    cluster = Cluster(plan, Supervisor(plan.log_dir))
    try:
        start_cluster(cluster, timeout_s=30)
        assert [c.name for c in cluster.supervisor.children] == ["controller", "node1", "node2", "gateway"]
        # start_cluster returned: it listens already (the banner's curl works at once).
        socket.create_connection(("127.0.0.1", plan.gateway_port), timeout=5).close()
        assert plan.gateway_argv[plan.gateway_argv.index("--secret-file") + 1] == str(plan.secret_file)
    finally:
        cluster.stop(grace_s=5)
    assert all(c.process.poll() is not None for c in cluster.supervisor.children)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", plan.gateway_port), timeout=1).close()


def test_the_gateway_port_defaults_to_6820_past_the_controllers_and_is_checked(tmp_path):
    plan = plan_up(UpOptions(state_dir=tmp_path), NO_GPUS, python="py")
    assert plan.gateway_port == 6820 and plan.ports == (6817,)
    assert plan.gateway_argv == ("py", "-m", "corral.cli.main", "gateway", "--controller", "http://127.0.0.1:6817",
                                 "--host", "127.0.0.1", "--port", "6820", "--secret-file", str(tmp_path / "secret"))
    text = banner(SimpleNamespace(plan=plan, name="lab", isolation=""), Recorded(tmp_path / "cluster.json"))
    assert "  gateway:   http://127.0.0.1:6820/s/SERVICE/ serves each service" in text
    four = plan_up(UpOptions(state_dir=tmp_path, controllers=4, db_url="postgresql+psycopg://u@h/db"), NO_GPUS)
    assert four.gateway_port == 6821
    assert plan_up(UpOptions(state_dir=tmp_path, gateway=False), NO_GPUS).gateway_argv == ()
    with pytest.raises(CliError, match="--gateway-port 6818 is a controller's port"):
        plan_up(UpOptions(state_dir=tmp_path, controllers=2, gateway_port=6818,
                          db_url="postgresql+psycopg://u@h/db"), NO_GPUS)
    with pytest.raises(CliError, match="--gateway-port and --no-gateway contradict"):
        plan_up(UpOptions(state_dir=tmp_path, gateway=False, gateway_port=7000), NO_GPUS)


def test_the_controllers_are_told_the_gateway_unless_the_config_names_one(tmp_path):
    two = plan_up(UpOptions(state_dir=tmp_path, controllers=2, gateway_port=7100), NO_GPUS, python="py")
    for argv in two.controller_argvs:  # a standby that takes over tells the dashboard the same
        assert argv[argv.index("--gateway-url") + 1] == "http://127.0.0.1:7100"
    named = plan_up(UpOptions(state_dir=tmp_path, config_gateway_url="https://gpu.example.org"), NO_GPUS)
    assert "--gateway-url" not in named.controller_argv, "the operator's [gateway] url is kept"
    assert "--gateway-url" not in plan_up(UpOptions(state_dir=tmp_path, gateway=False), NO_GPUS).controller_argv


def test_up_command_refuses_a_bad_gateway_url_in_its_config_before_starting(isolated, cli):
    config = isolated / "corral.toml"
    config.write_text('[gateway]\nurl = "gateway.example:6820"\n')
    result = cli("up", "--config", str(config), "--state-dir", str(isolated / "s"))
    assert result.exit_code == 1
    assert (f"{config} [gateway] url: 'gateway.example:6820': an http:// or https:// URL with a host"
            in result.stderr)
    assert not (isolated / "s").exists()


def test_up_command_gateway_port_in_use(isolated, cli):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli("up", "--port", str(free_port()), "--gateway-port", str(port), "--gpus-per-node", "2",
                     "--state-dir", str(isolated / "s"))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"corral: error: cannot listen on 127.0.0.1:{port}")
    assert "choose another --gateway-port" in result.stderr
    assert not (isolated / "s" / "secret").exists()


def test_child_dying_at_startup_is_reported(tmp_path):
    dying = (sys.executable, "-c", "import sys; sys.exit('fake controller: address already in use')")
    plan = fake_plan(tmp_path, controller=dying)
    write_secret(plan.secret_file)
    cluster = Cluster(plan, Supervisor(plan.log_dir))
    with pytest.raises(ChildExited) as info:
        start_cluster(cluster, timeout_s=30)
    assert "controller exited with status 1" in str(info.value)
    assert "fake controller: address already in use" in str(info.value)


DRIVER = """
import dataclasses, sys
sys.path.insert(0, {tests!r})
from cli.test_up import fake_plan
from corral.cli.up import run_up
from pathlib import Path
from types import SimpleNamespace
sys.exit(run_up(fake_plan(Path({tmp!r}))))
"""


def test_up_runs_in_the_foreground_until_sigterm(tmp_path):
    """The whole of `corral up` after planning, in its own process: ready, cluster.json, SIGTERM stops all."""
    proc = start_driver(tmp_path)
    try:
        banner = proc.stdout.readline()
        assert "cluster 'fake' is up: 2 node(s), 4 simulated GPUs each" in banner, proc.stderr.read()
        cluster_json = tmp_path / "config" / "corral" / "cluster.json"
        data = json.loads(cluster_json.read_text())
        assert data["url"].startswith("http://127.0.0.1:") and data["secret_file"].endswith("secret")
        assert cluster_json.stat().st_mode & 0o777 == 0o600
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    stderr = proc.stderr.read()
    assert "stopping the jobs, then the agents and the controller" in stderr
    assert "corral: stopping: 1 running job requeued; the next 'corral up' runs them\n" in stderr
    children = [json.loads(line)["pid"] for line in (tmp_path / "record.jsonl").read_text().splitlines()]
    time.sleep(0.1)
    for pid in children:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def start_driver(tmp_path):
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "CORRAL_SYSTEM_CLUSTER_FILE": str(tmp_path / "etc" / "cluster.json"),
           "FAKE_CLUSTER_RECORD": str(tmp_path / "record.jsonl")}
    driver = DRIVER.format(tests=str(Path(__file__).parents[1]), tmp=str(tmp_path))
    return subprocess.Popen([sys.executable, "-c", driver], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_up_stops_everything_when_a_child_dies(tmp_path):
    proc = start_driver(tmp_path)
    try:
        assert "is up" in proc.stdout.readline(), proc.stderr.read()
        records = [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]
        agent = next(r for r in records if r["role"] == "agent" and "node1" in r["argv"])
        os.kill(agent["pid"], signal.SIGKILL)
        assert proc.wait(timeout=30) == 1
    finally:
        proc.kill()
        proc.wait()
    assert "corral: error: node1 was killed by SIGKILL" in proc.stderr.read()


def test_startup_timeout_names_the_logs(tmp_path):
    silent = (sys.executable, "-c", "import time; time.sleep(30)")  # a controller that never answers
    plan = fake_plan(tmp_path, controller=silent)
    write_secret(plan.secret_file)
    cluster = Cluster(plan, Supervisor(plan.log_dir))
    try:
        expected = f"the controller did not answer within 0.3 s; see the logs in {plan.log_dir}"
        with pytest.raises(CliError, match=expected):
            start_cluster(cluster, timeout_s=0.3)
    finally:
        cluster.stop(grace_s=1)
    assert cluster.supervisor.children[0].process.returncode == -signal.SIGTERM
