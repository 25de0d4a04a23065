"""`corral ray`'s session service and the script each of its nodes runs, without Ray: a stand-in `ray`
records how it was started; the head's address comes from a real HTTP server standing in for the
controller's service view (tests/ray_on_corral runs the real thing on clusters)."""
from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from corral.api.services import ServiceSpec
from corral.cli.ray_spec import RAY_DIRECTORY_LONGEST, SOCKET_PATH_LIMIT, job_submit_line, ray_command, ray_session_spec

SECRET = "s" * 64


@pytest.fixture
def stand_in_ray(tmp_path):
    """A `ray` that writes its arguments and Ray's token variables to ray.args, one per line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ray = bin_dir / "ray"
    said = ("AUTH=$RAY_AUTH_MODE:$RAY_AUTH_TOKEN:$RAY_agent_register_timeout_ms"
            ' DIR=$RAY_TMPDIR:$(stat -c %a:%U "$RAY_TMPDIR")')
    ray.write_text(f'#!/bin/sh\n{{ echo "{said}"; for a in "$@"; do echo "$a"; done; }} > {tmp_path}/ray.args\n')
    ray.chmod(0o755)
    return bin_dir


def node_env(bin_dir, node_id: int, **extra: str) -> dict[str, str]:
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURMD_NODENAME": "localhost", "SLURM_NODEID": str(node_id),
            "SLURM_JOB_ID": "42", "CORRAL_SESSION_SECRET": SECRET, "CORRAL_PORT_AGENT": "52368",
            "CORRAL_PORT_AGENT_GRPC": "52369", "CORRAL_PORT_METRICS": "52370", "CORRAL_PORT_RUNTIME_ENV": "52371",
            **extra}


def run_node(command: list[str], env: dict[str, str], tmp_path) -> tuple[subprocess.CompletedProcess, list[str]]:
    result = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    args = tmp_path / "ray.args"
    return result, args.read_text().splitlines() if args.exists() else []


def test_the_first_node_starts_the_head_on_the_agents_ports_with_the_session_secret_as_rays_token(
        stand_in_ray, tmp_path):
    env = node_env(stand_in_ray, 0, CORRAL_PORT_DASHBOARD="8265", CORRAL_PORT_GCS="6380", CORRAL_PORT_CLIENT="10002",
                   CORRAL_PORT_AGENT="52366")
    result, args = run_node(ray_command("ray-ana", 2, 8, 100), env, tmp_path)
    assert result.returncode == 0, result.stderr
    auth, directory = args[0].split(" ")
    assert auth == f"AUTH=token:{SECRET}:120000", "Ray's token, and time for a loaded node's agents"
    assert args[1:4] == ["start", "--head", "--block"]
    ray_dir = directory.removeprefix("DIR=").split(":")[0]
    assert directory == f"DIR={ray_dir}:700:root" and ray_dir.startswith("/tmp/corral-ray-42."), \
        "its own directory, only its user's, for Ray's defaults too"
    assert not os.path.exists(ray_dir), "removed when the node's Ray ends"
    for expected in ("--port=6380", "--ray-client-server-port=10002", "--dashboard-port=8265",
                     "--dashboard-host=0.0.0.0", f"--temp-dir={ray_dir}", "--node-ip-address=127.0.0.1",
                     "--object-store-memory=104857600", '{"localhost": 1}', "--dashboard-agent-listen-port=52366"):
        assert expected in args, (expected, args)
    assert args[args.index("--num-cpus") + 1] == "8" and args[args.index("--num-gpus") + 1] == "2"


def test_a_ray_node_that_fails_to_start_is_started_again_and_a_stop_is_passed_on(tmp_path):
    """A raylet that gives up on its slow agents ends `ray start` with an error: started again, at most
    three times. SIGTERM (a cancel) reaches `ray start` and ends the loop."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ray").write_text(f"""#!/bin/sh
echo start >> {tmp_path}/starts
[ "$(wc -l < {tmp_path}/starts)" -ge 2 ] || exit 1
trap 'echo TERM >> {tmp_path}/starts; exit 0' TERM
while :; do sleep 0.1; done
""")
    (bin_dir / "ray").chmod(0o755)
    env = node_env(bin_dir, 0, CORRAL_PORT_DASHBOARD="1", CORRAL_PORT_GCS="2", CORRAL_PORT_CLIENT="3")
    node = subprocess.Popen(ray_command("r", 0, 1, None), env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    starts = tmp_path / "starts"
    deadline = time.monotonic() + 30
    while (not starts.exists() or len(starts.read_text().splitlines()) < 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    node.send_signal(signal.SIGTERM)
    _, stderr = node.communicate(timeout=30)
    assert starts.read_text().splitlines() == ["start", "start", "TERM"], stderr
    assert "the Ray node on localhost ended with status 1 (attempt 1 of 3); starting it again" in stderr
    assert node.returncode == 0


def test_a_ray_node_that_never_starts_gives_up_after_three_attempts(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ray").write_text(f"#!/bin/sh\necho start >> {tmp_path}/starts\nexit 3\n")
    (bin_dir / "ray").chmod(0o755)
    env = node_env(bin_dir, 0, CORRAL_PORT_DASHBOARD="1", CORRAL_PORT_GCS="2", CORRAL_PORT_CLIENT="3")
    result = subprocess.run(ray_command("r", 0, 1, None), env=env, cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 3 and (tmp_path / "starts").read_text().count("start") == 3, result.stderr


def test_two_ray_nodes_of_the_same_job_id_at_once_get_directories_of_their_own(tmp_path):
    """Two clusters on one host each have a job 42 (and a gang may put two of its nodes on one host): each Ray
    node gets a directory of its own while both run, not /tmp/ray nor one named after the job."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ray").write_text(f"""#!/bin/sh
echo "$RAY_TMPDIR" > {tmp_path}/dir.$CORRAL_PORT_GCS
trap 'exit 0' TERM
while :; do sleep 0.1; done
""")
    (bin_dir / "ray").chmod(0o755)
    nodes = [subprocess.Popen(ray_command("r", 0, 1, None), cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                              env=node_env(bin_dir, 0, CORRAL_PORT_DASHBOARD="1", CORRAL_PORT_GCS=str(gcs),
                                           CORRAL_PORT_CLIENT="3"))
             for gcs in (1, 2)]
    said = [tmp_path / "dir.1", tmp_path / "dir.2"]
    deadline = time.monotonic() + 30
    while not all(p.exists() and p.read_text() for p in said) and time.monotonic() < deadline:
        time.sleep(0.1)
    directories = [p.read_text().strip() for p in said]
    try:
        assert directories[0] != directories[1] and all(os.path.isdir(d) for d in directories), directories
    finally:
        for node in nodes:
            node.send_signal(signal.SIGTERM)
            node.communicate(timeout=30)
    assert not any(os.path.exists(d) for d in directories), "each removed when its Ray ends"


def test_rays_longest_socket_path_in_the_directory_fits_a_unix_socket():
    """Ray puts its sockets at <dir>/session_<date>_<time>_<us>_<pid>/sockets/plasma_store.N."""
    session = "session_2026-11-28_14-33-34_123456_4194304"
    longest = RAY_DIRECTORY_LONGEST + len(f"/{session}/sockets/plasma_store.99")
    assert longest <= SOCKET_PATH_LIMIT, longest


class _ServiceView(BaseHTTPRequestHandler):
    """The controller's GET /api/v1/services/NAME, as much of it as the script reads."""

    gcs = ""
    seen: list[tuple[str, str]] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.seen.append((self.path, self.headers.get("Authorization", "")))
        body = json.dumps({"replicas": [{"job_id": 41, "endpoints": {"gcs": "127.0.0.1:1", "agent": "127.0.0.1:1"}},
                                        {"job_id": 42, "endpoints": {"gcs": self.gcs, "agent": self.gcs}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_another_node_joins_the_head_whose_gcs_address_the_controller_reports(stand_in_ray, tmp_path):
    head = socket.create_server(("127.0.0.1", 0))  # the head's GCS, accepting
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ServiceView)
    _ServiceView.gcs = f"127.0.0.1:{head.getsockname()[1]}"
    _ServiceView.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = node_env(stand_in_ray, 1, CORRAL_URL=f"http://127.0.0.1:{server.server_address[1]}",
                       CORRAL_TOKEN="job-credential", CORRAL_PORT_AGENT="52367")
        result, args = run_node(ray_command("ray-ana", 0, 1, None), env, tmp_path)
    finally:
        server.shutdown()
        head.close()
    assert result.returncode == 0, result.stderr
    assert args[1:3] == ["start", f"--address={_ServiceView.gcs}"], args
    assert "--head" not in args and not any(a.startswith("--object-store-memory") for a in args)
    assert "--dashboard-agent-listen-port=52367" in args, "each node's job agent on the port its agent chose"
    assert {"--dashboard-agent-grpc-port=52369", "--metrics-export-port=52370", "--runtime-env-agent-port=52371"} \
        <= set(args), "the raylet is told its agents' ports rather than waiting 15 s for their port files"
    assert _ServiceView.seen[0] == ("/api/v1/services/ray-ana", "Bearer job-credential")


def test_a_node_without_a_head_to_join_says_why(stand_in_ray, tmp_path):
    command = ray_command("ray-ana", 0, 1, None)
    env = node_env(stand_in_ray, 1, CORRAL_URL="http://127.0.0.1:9", CORRAL_TOKEN="t")
    script = command[2].replace(" 300)", " 2)")  # a short wait for the test (HEAD_WAIT_S is 300)
    assert script != command[2]
    result, args = run_node(["/bin/sh", "-c", script], env, tmp_path)
    assert result.returncode == 2 and not args
    assert "no Ray head to join after 2 s: http://127.0.0.1:9:" in result.stderr, result.stderr


def test_without_ray_or_without_the_session_secret_nothing_starts(stand_in_ray, tmp_path):
    result, args = run_node(ray_command("r", 0, 1, None), {**node_env(stand_in_ray, 0), "PATH": "/usr/bin:/bin"},
                            tmp_path)
    assert (result.returncode, args) == (127, [])
    assert result.stderr.startswith("corral ray: 'ray' is not on PATH on "), result.stderr
    env = node_env(stand_in_ray, 0)
    del env["CORRAL_SESSION_SECRET"]
    result, args = run_node(ray_command("r", 0, 1, None), env, tmp_path)
    assert (result.returncode, args) == (2, [])
    assert "no session secret from the controller" in result.stderr


def test_the_session_spec_is_a_valid_owner_only_service_routed_to_the_dashboard_without_its_prefix():
    body = ray_session_spec(name="ray-ana-1a2b", workdir="/home/ana", nodes=2, gpus_per_node=1, cpus_per_node=4,
                            time_limit_s=3600, partition="gpu", environ={"PATH": "/venv/bin", "HOME": "/home/ana"})
    spec = ServiceSpec.model_validate(body)
    assert (spec.session, spec.keep_prefix, spec.public, spec.nodes, spec.replicas) == (True, False, False, 2, 1)
    assert [port.name for port in spec.ports] == ["dashboard", "gcs", "client", "agent", "agent_grpc", "metrics",
                                                  "runtime_env"], \
        "the gateway routes to the first"
    assert (spec.gpus_per_node, spec.cpus_per_task, spec.time_limit_s, spec.partition) == (1, 4, 3600, "gpu")
    assert spec.env == {"PATH": "/venv/bin"}, "the user's PATH finds their ray; nothing else is carried"
    readiness = spec.probes.readiness
    assert readiness is not None and readiness.tcp is not None and readiness.tcp.port == "agent", \
        "ready once the head's job agent listens: Ray refuses a job submitted before"


def test_the_submit_line_is_one_shell_command_with_the_credential_in_rays_headers():
    line = job_submit_line("https://gw.example", "ray-ana-1a2b", "tok'en")
    words = shlex.split(line)
    assert words[0].startswith("RAY_JOB_HEADERS=")
    assert json.loads(words[0].split("=", 1)[1]) == {"Authorization": "Bearer tok'en"}
    assert words[1:6] == ["ray", "job", "submit", "--address", "https://gw.example/s/ray-ana-1a2b"]
