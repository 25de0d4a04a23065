"""`corral service apply|list|show|scale|restart|delete|logs` and `corral logs SERVICE[/REPLICA]`, against
the stand-in controller (tests/cli/standin_services.py: the real ServiceSpec checks its bodies)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from corral.api.services import ServiceSpec
from corral.cli.render_services import parse_service_ref, probes_text

from .standin import make_job
from .standin_services import service_out

SERVICE_FILE = """\
name = "hello"
command = ["python3", "-m", "http.server"]
replicas = 2

[[ports]]
name = "http"

[probes.readiness]
http = { path = "/", port = "http" }
"""


def replica(index: int, job_id: int, **fields) -> dict:
    return {"index": index, "job_id": job_id, "revision": 1, "node": "node1", "state": "RUNNING", "ready": True,
            "restarts": 0, "probes": [], "endpoints": {"http": f"127.0.0.1:{8000 + index}"}, **fields}


def web(tmp_path, **fields) -> dict:
    spec = ServiceSpec.model_validate({"name": "web", "command": ["serve"], "workdir": str(tmp_path), "replicas": 2,
                                       "ports": [{"name": "http"}]})
    return service_out(spec, replicas=[
        replica(0, 10),
        replica(1, 11, ready=False, restarts=3, probes=[
            {"kind": "liveness", "ok": False, "consecutive": 3, "detail": "HTTP 500"}])], **fields)


def running_job(tmp_path, job_id: int) -> dict:
    return make_job(job_id, name="web", state="RUNNING", reason="None", start_time=1.0, workdir=str(tmp_path),
                    output="out-%j.txt", slices=[{"node": "node1", "gpus": [], "cpus": 1, "mem_mib": 0,
                                                  "gpu_milli": 1000}])


def test_apply_creates_then_is_unchanged_then_updates(standin, cli, tmp_path, monkeypatch):
    path = tmp_path / "svc.toml"
    path.write_text(SERVICE_FILE)
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    first = cli("service", "apply", "-f", str(path))
    assert (first.exit_code, first.stdout) == (0, "service hello created (revision 1)\n"), first.output
    # What the file says, and the workdir it implies (where apply ran, as sbatch's): the controller fills the
    # defaults.
    assert standin.state.service_posts[0] == {
        "name": "hello", "command": ["python3", "-m", "http.server"], "replicas": 2,
        "workdir": str(tmp_path / "here"),
        "ports": [{"name": "http"}], "probes": {"readiness": {"http": {"path": "/", "port": "http"}}}}
    assert cli("service", "apply", "-f", str(path)).stdout == "service hello unchanged (revision 1)\n"
    path.write_text(SERVICE_FILE.replace("replicas = 2", "replicas = 3"))
    updated = cli("service", "apply", "-f", str(path), "--json")
    assert json.loads(updated.stdout) == {"name": "hello", "outcome": "updated", "revision": 2}


def test_a_bad_file_is_refused_here_naming_the_key_and_nothing_is_sent(standin, cli, tmp_path):
    path = tmp_path / "svc.toml"
    path.write_text(SERVICE_FILE + "\n[[ports]]\nname = \"admin\"\nport = 70000\nprotocol = \"udp\"\n")
    result = cli("service", "apply", "-f", str(path))
    assert result.exit_code == 1
    assert (f"corral: error: {path}: ports[1].port: 70000 is not a port (1-65535, or 0: any free port on the node)"
            in result.stderr)
    assert f"corral: error: {path}: ports[1].protocol: unknown field (the known ones: name, port)" in result.stderr
    assert standin.state.service_posts == []


def test_list_shows_ready_of_desired_and_ports(standin, cli, tmp_path):
    standin.state.services["web"] = web(tmp_path, reason="Resources")
    lines = cli("service", "list").stdout.splitlines()
    assert lines[0].split() == ["NAME", "USER", "ACCOUNT", "READY", "REVISION", "PORTS", "REASON"]
    assert lines[1].split() == ["web", "alice", "-", "1/2", "1", "http:any", "Resources"]
    assert [s["name"] for s in json.loads(cli("service", "list", "--json").stdout)] == ["web"]


def test_show_lists_replicas_with_node_state_restarts_probes_and_endpoints(standin, cli, tmp_path):
    standin.state.services["web"] = web(tmp_path, history=["replica 1 restarted: liveness probe failed 3 times: "
                                                           "HTTP 500"])
    out = cli("service", "show", "web").stdout
    assert "Service web  user alice  account -  revision 1" in out
    assert "Replicas: 1 ready of 2 desired" in out
    rows = [line.split(None, 7) for line in out.splitlines() if line.startswith(("0 ", "1 "))]
    assert rows[0][:7] == ["0", "10", "1", "node1", "RUNNING", "yes", "0"]
    assert rows[1][:7] == ["1", "11", "1", "node1", "RUNNING", "no", "3"]
    assert "liveness failed x3 (HTTP 500)" in rows[1][7] and "http=127.0.0.1:8001" in rows[1][7]
    assert "  replica 1 restarted: liveness probe failed 3 times: HTTP 500" in out


def test_scale_restart_delete(standin, cli, tmp_path):
    standin.state.services["web"] = web(tmp_path)
    assert cli("service", "scale", "web", "4").stdout == "service web scaled to 4 replicas (1 ready now)\n"
    assert cli("service", "restart", "web").stdout == "service web restarting its replicas\n"
    assert ("restart", "web") in standin.state.actions
    assert cli("service", "delete", "web").stdout == "service web deleted\n"
    gone = cli("service", "delete", "web")
    assert gone.exit_code == 1 and "unknown service 'web'" in gone.stderr
    assert cli("service", "scale", "web", "-1").exit_code == 2  # refused here: not a count


def test_logs_of_one_replica_and_of_all(standin, cli, tmp_path):
    standin.state.services["web"] = web(tmp_path)
    for job_id in (10, 11):
        standin.state.jobs[job_id] = running_job(tmp_path, job_id)
        (tmp_path / f"out-{job_id}.txt").write_bytes(f"serving {job_id}\n".encode())
    standin.state.jobs[10]["state"] = standin.state.jobs[11]["state"] = "COMPLETED"
    assert cli("logs", "web/1").stdout == "serving 11\n"
    assert cli("service", "logs", "web/0").stdout == "serving 10\n"
    both = cli("logs", "web")
    assert both.stdout == "==> web/0 (job 10) <==\nserving 10\n\n==> web/1 (job 11) <==\nserving 11\n"
    missing = cli("logs", "web/9")
    assert missing.exit_code == 1 and "service web has no replica 9 (its replicas: 0, 1)" in missing.stderr
    assert "unknown service 'nosuch'" in cli("logs", "nosuch").stderr


@pytest.mark.parametrize(("text", "expected"), [("web", ("web", None)), ("web/2", ("web", 2))])
def test_service_refs(text, expected):
    assert parse_service_ref(text) == expected


@pytest.mark.parametrize(("text", "problem"), [("/1", "names no service"), ("web/x", "must be its index")])
def test_bad_service_refs(text, problem):
    with pytest.raises(ValueError, match=problem):
        parse_service_ref(text)


def test_probe_text_before_any_report():
    assert probes_text({"probes": []}) == "-"


def test_the_service_commands_start_without_pydantic():
    """Only `apply` reads a spec; the other commands start as fast as the rest of the CLI."""
    code = ("import sys; import corral.cli.main; import corral.cli.services; "
            "print('pydantic' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_logs_follow_every_replica_until_they_end(standin, cli, tmp_path):
    import threading
    import time

    standin.state.services["web"] = web(tmp_path)
    for job_id in (10, 11):
        standin.state.jobs[job_id] = running_job(tmp_path, job_id)
        (tmp_path / f"out-{job_id}.txt").write_bytes(f"start {job_id}\n".encode())

    def write_then_end() -> None:
        time.sleep(1.0)
        with open(tmp_path / "out-11.txt", "ab") as out:
            out.write(b"request 11\n")
        time.sleep(0.5)
        for job_id in (10, 11):
            standin.state.jobs[job_id]["state"] = "COMPLETED"

    writer = threading.Thread(target=write_then_end)
    writer.start()
    result = cli("logs", "web", "-f")
    writer.join()
    assert result.exit_code == 0, result.output
    assert result.stdout == ("==> web/0 (job 10) <==\nstart 10\n\n==> web/1 (job 11) <==\nstart 11\nrequest 11\n")
