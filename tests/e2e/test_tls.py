"""TLS (issue 12, item 6): a real controller serving HTTPS with a certificate from a CA made by the test;
sbatch, squeue, the `corral` CLI and the agents verify it. A client that does not trust that CA, or a
certificate that does not name the host, is refused with a message naming the URL and the CA file (no
traceback), and nothing reaches the controller."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from corral.cli import lean_commands
from corral.slurm.common.commands_dir import slurm_commands_dir
from tests.e2e.harness import Cluster, make_tls, wait_for

pytestmark = pytest.mark.slow


def command(cluster, tmp_path: Path, argv: list[str], ca_file: Path | None, url: str | None = None):
    """A Slurm command (by name) or `corral` (["corral", ...]) as a user's shell would run it."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "CORRAL_"))}
    env.update(CORRAL_URL=url or cluster.url, CORRAL_SECRET_FILE=str(cluster.secret_file),
               XDG_CONFIG_HOME=str(tmp_path / "no-config"))
    if ca_file is not None:
        env["CORRAL_CA_FILE"] = str(ca_file)
    if argv[0] == "corral":
        argv = [sys.executable, "-m", "corral.cli.main", *argv[1:]]
    else:
        argv = [str(Path(slurm_commands_dir(tmp_path / "cmds")) / argv[0]), *argv[1:]]
    return subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)


def other_ca(tmp_path: Path) -> Path:
    (tmp_path / "other").mkdir()
    return make_tls(tmp_path / "other")[0]


def test_sbatch_squeue_corral_and_agents_over_https(cluster_factory, tmp_path, capsys):
    cluster = cluster_factory(nodes=1, gpus=1, tls_names=("127.0.0.1", "localhost"))
    assert cluster.url.startswith("https://")
    # The job itself calls squeue: the agent hands its CA file to its jobs.
    submitted = command(cluster, tmp_path, ["sbatch", "--parsable", "-o", "out.txt",
                                            "--wrap", "squeue -h -j $SLURM_JOB_ID -o %i:%T"], cluster.ca_file)
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.strip())
    queue = command(cluster, tmp_path, ["squeue", "-h", "-o", "%i"], cluster.ca_file)
    assert queue.returncode == 0, queue.stderr
    cluster.wait_state(job_id, "COMPLETED")
    assert (tmp_path / "out.txt").read_text() == f"{job_id}:RUNNING\n"
    listed = command(cluster, tmp_path, ["corral", "acct"], cluster.ca_file)
    assert listed.returncode == 0 and str(job_id) in listed.stdout, listed.stderr
    # The lean `corral queue` (no Typer, no httpx) verifies the controller too, and answers itself.
    env = {"CORRAL_URL": cluster.url, "CORRAL_SECRET_FILE": str(cluster.secret_file),
           "CORRAL_CA_FILE": str(cluster.ca_file), "XDG_CONFIG_HOME": str(tmp_path / "no-config"),
           "CORRAL_SYSTEM_CLUSTER_FILE": str(tmp_path / "no-etc" / "cluster.json")}
    assert lean_commands.run(["queue", "--all"], env) == 0
    assert str(job_id) in capsys.readouterr().out
    assert lean_commands.run(["queue"], {**env, "CORRAL_CA_FILE": str(other_ca(tmp_path))}) is None


@pytest.mark.parametrize("which", ["no CA file", "another CA"])
def test_client_that_does_not_trust_the_ca_is_refused(cluster_factory, tmp_path, which):
    cluster = cluster_factory(nodes=1, gpus=1, tls_names=("127.0.0.1",))
    ca_file = other_ca(tmp_path) if which == "another CA" else None
    trusted = (f"the CA file {ca_file}: " if ca_file else
               "the system's trusted CAs (no CA file given: set CORRAL_CA_FILE")
    expected = f"the controller's certificate at {cluster.url} does not verify against {trusted}"
    sbatch = command(cluster, tmp_path, ["sbatch", "--wrap", "true"], ca_file)
    assert sbatch.returncode == 1
    assert sbatch.stderr.startswith("sbatch: error: Unable to contact slurm controller (connect failure)\n"
                                    f"sbatch: error: {expected}"), sbatch.stderr
    corral = command(cluster, tmp_path, ["corral", "submit", "--wrap", "true"], ca_file)
    assert corral.returncode == 1 and corral.stderr.startswith(f"corral: error: {expected}"), corral.stderr
    assert "Traceback" not in sbatch.stderr + corral.stderr
    assert cluster.http.get("/api/v1/jobs", params={"all": "true"}).json() == []


def test_certificate_for_another_host_name_is_refused(tmp_path):
    cluster = Cluster(tmp_path, nodes=1, gpus=1, tls_names=("node9.example.org",))  # not 127.0.0.1
    try:
        cluster.start_controller()
        cluster.start_agent("node1")
        sbatch = command(cluster, tmp_path, ["sbatch", "--wrap", "true"], cluster.ca_file)
        assert sbatch.returncode == 1
        refusal = (f"the controller's certificate at {cluster.url} does not verify against the CA file "
                   f"{cluster.ca_file}: IP address mismatch")
        assert f"sbatch: error: {refusal}" in sbatch.stderr, sbatch.stderr
        log = tmp_path / "agent-node1.log"
        wait_for(lambda: refusal in log.read_text(), message="the agent's refusal in its log")
        assert cluster.nodes() == [] and cluster.http.get("/api/v1/jobs").json() == []
    finally:
        cluster.stop()


def test_wrong_scheme_is_explained(cluster_factory, tmp_path):
    tls = cluster_factory(nodes=1, gpus=1, tls_names=("127.0.0.1",))
    plain_url = tls.url.replace("https://", "http://")
    squeue = command(tls, tmp_path, ["squeue"], tls.ca_file, url=plain_url)
    assert squeue.returncode == 1 and "if it serves HTTPS, use an https:// URL" in squeue.stderr, squeue.stderr
    corral = command(tls, tmp_path, ["corral", "queue"], tls.ca_file, url=plain_url)
    assert corral.returncode == 1 and "if it serves HTTPS, use an https:// URL" in corral.stderr, corral.stderr

    (tmp_path / "plain").mkdir()
    plain = Cluster(tmp_path / "plain", nodes=1)
    plain.start_controller()
    try:
        https_url = plain.url.replace("http://", "https://")
        squeue = command(plain, tmp_path, ["squeue"], tls.ca_file, url=https_url)
        assert squeue.returncode == 1
        assert (f"squeue: error: the TLS handshake with the controller at {https_url} failed"
                in squeue.stderr and "use an http:// URL" in squeue.stderr), squeue.stderr
        corral = command(plain, tmp_path, ["corral", "queue"], tls.ca_file, url=https_url)
        assert corral.returncode == 1 and "use an http:// URL" in corral.stderr, corral.stderr
    finally:
        plain.stop()


def test_agent_that_does_not_trust_the_ca_does_not_register(cluster_factory, tmp_path):
    cluster = cluster_factory(nodes=1, gpus=1, tls_names=("127.0.0.1",))
    cluster.ca_file = other_ca(tmp_path)
    cluster.node_names.append("node2")
    cluster.start_agent("node2")
    log = tmp_path / "agent-node2.log"
    wait_for(lambda: "does not verify" in log.read_text(), message="the agent's refusal in its log")
    assert (f"the controller's certificate at {cluster.url} does not verify against the CA file "
            f"{cluster.ca_file}") in log.read_text()
    assert [n["name"] for n in cluster.nodes()] == ["node1"]


def test_corral_up_tls_end_to_end(tmp_path):
    """`corral up --tls`: a CA and a certificate in the state dir (keys 0600), everything over https, and
    cluster.json records the CA, so that sbatch and squeue need no setting of their own."""
    from cryptography import x509

    from tests.e2e.harness import free_port

    state, port = tmp_path / "state", free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "CORRAL_"))}
    # As root, `corral up` writes the host's cluster.json: the test's own, not the one other clusters here use.
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), PYTHONUNBUFFERED="1",
               CORRAL_SYSTEM_CLUSTER_FILE=str(tmp_path / "etc" / "cluster.json"))
    up = subprocess.Popen([sys.executable, "-m", "corral.cli.main", "up", "--tls", "--nodes", "1",
                           "--gpus-per-node", "1", "--port", str(port), "--state-dir", str(state)],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = up.stdout.readline()
        assert "is up" in banner, up.stderr.read() if up.poll() is not None else banner
        cluster_json = (tmp_path / "config" / "corral" / "cluster.json").read_text()
        tls = state / "tls"
        assert f'"url": "https://127.0.0.1:{port}"' in cluster_json
        assert f'"ca_file": "{tls / "ca.pem"}"' in cluster_json
        for key in ("ca.key", "controller.key"):
            assert (tls / key).stat().st_mode & 0o777 == 0o600
        cert = x509.load_pem_x509_certificate((tls / "controller.pem").read_bytes())
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        import socket
        assert {"localhost", socket.gethostname()} <= set(sans.get_values_for_type(x509.DNSName))
        assert {"127.0.0.1", "::1"} <= {str(a) for a in sans.get_values_for_type(x509.IPAddress)}

        cmds = Path(slurm_commands_dir(tmp_path / "cmds"))
        run = lambda *argv: subprocess.run([str(cmds / argv[0]), *argv[1:]], env=env, cwd=tmp_path,  # noqa: E731
                                           capture_output=True, text=True, timeout=60)
        submitted = run("sbatch", "--parsable", "-o", "out.txt", "--wrap", "echo over-tls")
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()
        wait_for(lambda: run("sacct", "-n", "-X", "-P", "-o", "State", "-j", job_id).stdout.strip() == "COMPLETED",
                 timeout_s=60, message=f"job {job_id} COMPLETED")
        assert (tmp_path / "out.txt").read_text() == "over-tls\n"
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=60) == 0, up.stderr.read()
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
