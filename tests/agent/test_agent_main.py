"""`python -m corral.agent`: arguments, secret handling, and a real agent process that stops cleanly."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from corral.agent.__main__ import default_spool_dir, main, read_secret


def test_missing_secret_file_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--controller", "http://x", "--secret-file", str(tmp_path / "nope"), "--node", "n1", "--gpus", "0"])
    assert exited.value.code == 2
    assert "secret file" in capsys.readouterr().err


def test_empty_secret_file_exits_2(tmp_path, capsys):
    secret_file = tmp_path / "secret"
    secret_file.write_text("\n")
    with pytest.raises(SystemExit) as exited:
        main(["--controller", "http://x", "--secret-file", str(secret_file), "--node", "n1", "--gpus", "0"])
    assert exited.value.code == 2
    assert "empty" in capsys.readouterr().err


def test_a_cluster_file_without_an_auth_socket_exits_2(tmp_path, capsys):
    secret_file = tmp_path / "secret"
    secret_file.write_text("ca1.n1.x\n")
    with pytest.raises(SystemExit) as exited:
        main(["--controller", "http://x", "--secret-file", str(secret_file), "--node", "n1", "--gpus", "0",
              "--cluster-file", str(tmp_path / "cluster.json")])
    assert exited.value.code == 2
    assert "--cluster-file needs --auth-socket" in capsys.readouterr().err
    assert not (tmp_path / "cluster.json").exists()


def test_read_secret_takes_the_first_line(tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_text("  s3cret \nignored\n")
    assert read_secret(secret_file) == "s3cret"


def test_discovery_failure_exits_1_with_a_hint(tmp_path, capsys, monkeypatch):
    pynvml = pytest.importorskip("pynvml")

    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    secret_file = tmp_path / "secret"
    secret_file.write_text("s3cret\n")
    assert main(["--controller", "http://x", "--secret-file", str(secret_file), "--node", "n1"]) == 1
    assert "--gpus N" in capsys.readouterr().err


def test_default_spool_dir(monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", "/state")
    assert default_spool_dir("n3") == Path("/state/corral/agent-n3")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", "/home/bob")
    assert default_spool_dir("n3") == Path("/home/bob/.local/state/corral/agent-n3")
    assert default_spool_dir("n3", run_as_user=True) == Path("/var/spool/corral/agent-n3")


def test_sigterm_stops_the_agent_and_leaves_tasks_running(agent_process_with_a_task, is_dead):
    with agent_process_with_a_task() as (agent, task_pid):
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=5) == 0
        assert b"running tasks are left alone" in agent.stderr.read()
        assert not is_dead(task_pid, within_s=0.3)  # the job outlives its agent, as under slurmd


def test_a_controller_name_that_does_not_resolve_without_address_exits_1(tmp_path):
    """The agent advertises its address towards the controller (MASTER_ADDR of its jobs): when it
    cannot tell it, it says so at start instead of registering a wrong one."""
    secret_file = tmp_path / "secret"
    secret_file.write_text("s3cret\n")
    done = subprocess.run([sys.executable, "-m", "corral.agent", "--controller", "http://no-such-host.invalid:6817",
                           "--secret-file", str(secret_file), "--node", "n1", "--gpus", "0",
                           "--spool", str(tmp_path / "spool")], capture_output=True, text=True, timeout=20)
    assert done.returncode == 1, done.stderr
    assert "cannot tell this host's address towards http://no-such-host.invalid:6817" in done.stderr
    assert "--address" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(("urls", "message"), [
    ("http://a:1,,http://b:2", "has an empty controller URL"),
    ("http://a:1,http://a:1/", "names the controller http://a:1 more than once"),
    ("http://a:1,https://b:2", "mixes http:// and https://"),
])
def test_a_bad_controller_list_exits_2(tmp_path, capsys, urls, message):
    secret_file = tmp_path / "secret"
    secret_file.write_text("s3cret\n")
    with pytest.raises(SystemExit) as exited:
        main(["--controller", urls, "--secret-file", str(secret_file), "--node", "n1", "--gpus", "0"])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_an_agent_given_several_controllers_finds_the_one_that_answers_and_passes_them_all_on(
        controller, make_launch, tmp_path):
    """Its jobs get every URL in CORRAL_URL, and the host's cluster.json lists them all."""
    import json

    from tests.ha_standin import nothing_listening

    urls = f"{nothing_listening()},{controller.url}"
    secret_file = tmp_path / "secret"
    secret_file.write_text("test-secret\n")
    cluster_file = tmp_path / "etc" / "cluster.json"
    agent = subprocess.Popen(
        [sys.executable, "-m", "corral.agent", "--controller", urls, "--secret-file", str(secret_file),
         "--node", "n1", "--gpus", "0", "--cpus", "2", "--mem-mib", "1024", "--spool", str(tmp_path / "spool"),
         "--tasks-as-agent-user", "--no-cgroups", "--auth-socket", str(tmp_path / "auth.sock"),
         "--cluster-file", str(cluster_file)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        controller.wait(lambda: controller.polls, timeout_s=15)
        assert json.loads(cluster_file.read_text())["urls"] == urls.split(",")
        assert json.loads(cluster_file.read_text())["url"] == urls.split(",")[0]
        controller.send(make_launch(job_id=32, argv=["sh", "-c", 'echo "$CORRAL_URL" > url.txt']))
        controller.wait(lambda: controller.finished(32), timeout_s=10)
        assert (tmp_path / "url.txt").read_text() == urls + "\n"
    finally:
        agent.terminate()
        agent.wait(timeout=10)


@pytest.mark.parametrize("features", ["ib,a&b", "[ib]", "a|b", "x" * 65])
def test_a_feature_that_is_no_plain_name_exits_2(tmp_path, capsys, features):
    secret_file = tmp_path / "secret"
    secret_file.write_text("s3cret\n")
    with pytest.raises(SystemExit) as exited:
        main(["--controller", "http://x", "--secret-file", str(secret_file), "--node", "n1", "--gpus", "0",
              "--feature", features])
    assert exited.value.code == 2
    assert "invalid feature" in capsys.readouterr().err


def test_the_controller_refuses_a_registration_whose_feature_is_no_plain_name():
    from pydantic import ValidationError

    from corral.protocol import Registration

    base = {"node": "n1", "address": "127.0.0.1", "gpus": [], "cpus": 1, "mem_mib": 1}
    assert Registration(**base, features=["ib", "a100"]).features == ["ib", "a100"]
    with pytest.raises(ValidationError):
        Registration(**base, features=["ib&nvme"])


def test_the_image_caches_options_reach_the_nodes_cache(tmp_path, capsys):
    """Issue 25: the cache's directory, size limit and plain-HTTP registries are the agent's options (and so
    its unit's CORRAL_AGENT_ARGS); the registries reached no cache before (every pull used TLS)."""
    import shutil

    from corral.agent.__main__ import build_parser, with_containers
    from corral.agent.container_runtime import RUNTIME_TOOLS
    from corral.agent.tasks import DEVELOPMENT_MODE

    base = ["--controller", "http://x", "--secret-file", "s", "--node", "n1"]
    args = build_parser().parse_args([*base, "--image-cache", str(tmp_path / "images"), "--image-cache-limit", "3G",
                                      "--insecure-registry", "registry.lab:5000,mirror.lab",
                                      "--insecure-registry", "localhost:5001"])
    assert args.insecure_registry == ["registry.lab:5000", "mirror.lab", "localhost:5001"]
    with pytest.raises(SystemExit):
        build_parser().parse_args([*base, "--insecure-registry", "http://registry.lab:5000"])
    assert "is not a registry: write HOST or HOST:PORT" in capsys.readouterr().err
    if not all(shutil.which(tool) for tool in RUNTIME_TOOLS):
        pytest.skip("the node's cache exists only where runc and uidmap are installed")
    confinement, features = with_containers(args, DEVELOPMENT_MODE, tmp_path / "spool", {})
    assert confinement.containers is not None and "runc" in features
    cache = confinement.containers.cache
    assert (cache.directory, cache.limit_bytes) == (tmp_path / "images", 3 << 30)
    assert cache.insecure_registries == {"registry.lab:5000", "mirror.lab", "localhost:5001"}
