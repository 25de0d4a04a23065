"""Adding a machine with a one-time join token, as docs/adding-a-machine.md tells an admin to: `corral token
create --join` on the head, `corral agent join URL --token ...` on the new machine (over HTTPS, with the
cluster's CA), then its agent with the credential that wrote. Real controller, agents and commands."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from corral.controller import credentials as cred
from tests.e2e.harness import wait_for

pytestmark = pytest.mark.slow


def corral(cluster, tmp_path: Path, *argv: str, admin: bool = True) -> subprocess.CompletedProcess:
    """`corral ...` as a shell on a host would run it: the head's admin holds the secret; a new machine
    holds nothing."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "CORRAL_"))}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "no-config"),
               CORRAL_SYSTEM_CLUSTER_FILE=str(tmp_path / "no-cluster.json"))
    if admin:
        env.update(CORRAL_URL=cluster.url, CORRAL_SECRET_FILE=str(cluster.secret_file),
                   CORRAL_CA_FILE=str(cluster.ca_file))
    return subprocess.run([sys.executable, "-m", "corral.cli.main", *argv], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


def test_a_new_machine_joins_with_a_token_and_runs_a_job(cluster_factory, tmp_path):
    # A cluster with an id on its hosts, as `corral up` gives it: the new machine's agent carries it too.
    cluster = cluster_factory(nodes=1, gpus=1, tls_names=("127.0.0.1", "localhost"),
                              controller_args=("--cluster-id", "j01n"))
    made = corral(cluster, tmp_path, "token", "create", "--join", "--node", "node2", "--expires", "10m")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith(cred.JOIN_PREFIX) and "joins node node2, once" in made.stderr
    etc = tmp_path / "etc-node2"
    credential_file, env_file = etc / "agent.credential", etc / "agent.env"
    join = ["agent", "join", cluster.url, "--node", "node2", "--credential-file", str(credential_file),
            "--env-file", str(env_file), "--ca-file", str(cluster.ca_file)]

    joined = corral(cluster, tmp_path, *join, "--token", token, admin=False)
    assert joined.returncode == 0, joined.stderr
    assert "joined the cluster as node node2" in joined.stdout
    assert "systemctl enable --now corral-agent" in joined.stdout
    assert stat.S_IMODE(credential_file.stat().st_mode) == 0o600
    assert credential_file.read_text().strip() == cred.issue_agent(cred.signing_key(cluster.secret), "node2")
    assert env_file.read_text().splitlines()[1:] == [
        f"CORRAL_CONTROLLER={cluster.url}", "CORRAL_NODE=node2",
        f"CORRAL_AGENT_ARGS=--ca-file {cluster.ca_file} --cluster-id j01n"]

    again = corral(cluster, tmp_path, *join, admin=False)  # a machine that joined needs no token again
    assert again.returncode == 0 and "has joined as node node2" in again.stdout, again.stderr

    cluster.agents["node2"] = cluster._spawn(
        ["-m", "corral.agent", "--controller", cluster.url, "--secret-file", str(credential_file), "--node", "node2",
         "--gpus", "1", "--cpus", "4", "--mem-mib", "4000", "--spool", str(tmp_path / "spool-node2"),
         "--ca-file", str(cluster.ca_file), "--cluster-id", "j01n", *cluster.agent_args], "agent-node2.log")
    wait_for(lambda: any(n["name"] == "node2" and n["state"] != "down" for n in cluster.nodes()),
             message="node2's agent registered")
    job_id = cluster.submit(argv=["hostname"], nodes=2)  # needs node1 and the new node2
    done = cluster.wait_state(job_id, "COMPLETED")
    assert done["nodelist"] == "node[1-2]"

    audit = corral(cluster, tmp_path, "audit", "--json")
    assert '"action": "join node"' in audit.stdout and '"who": "node2"' in audit.stdout


def test_a_used_or_wrong_token_is_one_line_and_writes_nothing(cluster_factory, tmp_path):
    cluster = cluster_factory(nodes=1, gpus=1, tls_names=("127.0.0.1", "localhost"))
    token = corral(cluster, tmp_path, "token", "create", "--join", "--node", "node2").stdout.strip()
    credential_file = tmp_path / "etc" / "agent.credential"

    def join(node: str, text: str) -> subprocess.CompletedProcess:
        return corral(cluster, tmp_path, "agent", "join", cluster.url, "--node", node, "--token", text,
                      "--credential-file", str(credential_file), "--env-file", str(tmp_path / "etc" / "agent.env"),
                      "--ca-file", str(cluster.ca_file), admin=False)

    wrong = join("node3", token)
    assert wrong.returncode == 1 and wrong.stdout == ""
    assert wrong.stderr == ("corral: error: the controller refused to join node node3: Access/permission denied: "
                            "join token 1 is for node node2, not node3\n")
    assert not credential_file.exists() and not (tmp_path / "etc" / "agent.env").exists()
    assert join("node2", token).returncode == 0
    credential_file.unlink()
    used = join("node2", token)
    assert used.returncode == 1 and used.stderr == ("corral: error: the controller refused to join node node2: "
                                                    "not authenticated: join token 1 was already used\n")
    assert not credential_file.exists()
    listed = corral(cluster, tmp_path, "token", "list", "--join").stdout.splitlines()
    assert listed[0].split() == ["ID", "NODE", "CREATED", "BY", "EXPIRES", "STATE", "DESCRIPTION"]
    assert listed[1].split()[:2] == ["1", "node2"] and "used by node2 from 127.0.0.1" in listed[1]
    second = corral(cluster, tmp_path, "token", "create", "--join").stdout.strip()
    assert corral(cluster, tmp_path, "token", "revoke", "--join", "2").stdout == "Revoked join token 2\n"
    revoked = join("node3", second)
    assert revoked.returncode == 1 and revoked.stderr.endswith("join token 2 was revoked\n")
    assert not credential_file.exists()
    not_a_token = join("node2", cluster.secret)
    assert not_a_token.returncode == 1 and "--token is not a join token" in not_a_token.stderr
