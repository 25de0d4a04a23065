"""ServiceSpec and its TOML file (issue 22's bad-input paragraph): good specs pass with their defaults, and
every bad one is refused with one line naming the field (the TOML key path) and what is wrong."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
from pydantic import ValidationError

from corral.api.service_file import ServiceFileError, load_service_file, parse_service
from corral.api.services import REPLICAS_MAX, ServiceSpec, location, problems

BASE = {"name": "web", "command": ["python3", "-m", "http.server"], "workdir": "/srv",
        "ports": [{"name": "http", "port": 0}]}


def spec_with(**changes) -> dict:
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def refusal(data: dict) -> list[str]:
    with pytest.raises(ValidationError) as info:
        ServiceSpec.model_validate(data)
    return problems(info.value)


def test_a_minimal_spec_gets_the_designs_defaults():
    spec = ServiceSpec.model_validate(BASE)
    assert spec.replicas == 1 and spec.nodes == 1 and spec.gpus_per_node == 0
    assert (spec.restart.backoff_initial_s, spec.restart.backoff_max_s, spec.restart.reset_after_s) == (10, 300, 600)
    assert (spec.update.max_surge, spec.update.max_unavailable, spec.update.ready_timeout_s) == (1, 0, 600)
    assert spec.time_limit_s is None and spec.public is False and spec.autoscale is None
    assert spec.probes.named() == []


def test_a_full_spec_passes():
    spec = ServiceSpec.model_validate(spec_with(
        replicas=2, gpus_per_node=1, env={"MODEL": "tiny"},
        ports=[{"name": "http", "port": 8080}, {"name": "metrics"}],
        probes={"startup": {"http": {"path": "/health", "port": "http"}, "failure_threshold": 30},
                "readiness": {"tcp": {"port": "http"}, "period_s": 2},
                "liveness": {"exec": {"command": ["true"]}}},
        placement={"spread": True, "max_per_node": 1}, min_ready=1,
        autoscale={"min_replicas": 1, "max_replicas": 4, "target_inflight": 8}))
    assert spec.probes.readiness is not None and spec.probes.readiness.port == "http"
    assert spec.ports[1].port == 0
    assert spec.autoscale is not None and spec.autoscale.target_rps is None


@pytest.mark.parametrize(("changes", "expected"), [
    ({"colour": "blue"}, "colour: unknown field (the known ones: account, autoscale,"),
    ({"ports": [{"name": "http", "port": 8080, "protocol": "udp"}]},
     "ports[0].protocol: unknown field (the known ones: name, port)"),
    ({"probes": {"readiness": {"http": {"port": "http", "verb": "HEAD"}}}},
     "probes.readiness.http.verb: unknown field (the known ones: path, port)"),
    ({"ports": [{"name": "http", "port": 8080}, {"name": "admin", "port": 70000}]},
     "ports[1].port: 70000 is not a port (1-65535, or 0: any free port on the node)"),
    ({"ports": [{"name": "http", "port": -1}]}, "ports[0].port: -1 is not a port"),
    ({"ports": [{"name": "http", "port": 8080}, {"name": "http", "port": 8081}]},
     "ports[1].name: 'http' is also the name of ports[0]"),
    ({"ports": [{"name": "a", "port": 8080}, {"name": "b", "port": 8080}]},
     "ports[1].port: 8080 is also ports[0]'s"),
    ({"ports": [{"name": "Web-UI"}]}, "ports[0].name: String should match pattern"),
    ({"probes": {"readiness": {"http": {"path": "/", "port": "grpc"}}}},
     "probes.readiness.http.port: 'grpc' is not one of the service's ports (the service's ports are http)"),
    ({"ports": None, "probes": {"liveness": {"tcp": {"port": "http"}}}},
     "probes.liveness.tcp.port: 'http' is not one of the service's ports (the service declares no ports)"),
    ({"probes": {"readiness": {"period_s": 5}}},
     "probes.readiness: a probe needs exactly one of http, tcp or exec: none is given"),
    ({"probes": {"readiness": {"tcp": {"port": "http"}, "exec": {"command": ["true"]}}}},
     "probes.readiness: a probe needs exactly one of http, tcp or exec: tcp and exec are given"),
    ({"probes": {"liveness": {"tcp": {"port": "http"}, "success_threshold": 2}}},
     "probes.liveness.success_threshold: must be 1 for a liveness probe"),
    ({"probes": {"startup": {"exec": {"command": []}}}}, "probes.startup.exec.command: List should have at least 1"),
    ({"probes": {"readiness": {"tcp": {"port": "http"}, "period_s": 0}}},
     "probes.readiness.period_s: Input should be greater than 0"),
    ({"replicas": 5, "autoscale": {"min_replicas": 1, "max_replicas": 4, "target_rps": 10}},
     "replicas: 5 is outside autoscale's range (1 to 4)"),
    ({"autoscale": {"max_replicas": 4}},
     "autoscale: give exactly one of target_inflight or target_rps: neither is given"),
    ({"autoscale": {"max_replicas": 4, "target_rps": 1, "target_inflight": 2}},
     "autoscale: give exactly one of target_inflight or target_rps: both are given"),
    ({"autoscale": {"min_replicas": 3, "max_replicas": 2, "target_rps": 1}},
     "autoscale.min_replicas: 3 is more than max_replicas (2)"),
    ({"replicas": REPLICAS_MAX + 1}, f"replicas: Input should be less than or equal to {REPLICAS_MAX}"),
    ({"replicas": -1}, "replicas: Input should be greater than or equal to 0"),
    ({"replicas": 2, "min_ready": 3}, "min_ready: 3 is more than replicas (2): the service could never meet it"),
    ({"command": None}, "command: give exactly one of command or script: neither is given"),
    ({"script": "#!/bin/sh\nexec server\n"}, "command: give exactly one of command or script: both are given"),
    ({"command": []}, "command: an empty command runs nothing"),
    ({"name": "Web_1"}, "name: String should match pattern"),
    ({"name": "x" * 64}, "name: String should have at most 63 characters"),
    ({"workdir": "srv"}, "workdir: the working directory must be an absolute path"),
    ({"workdir": None}, "workdir: required, and missing"),
    ({"restart": {"backoff_initial_s": 600, "backoff_max_s": 300}},
     "restart.backoff_initial_s: 600 is more than backoff_max_s (300)"),
    ({"update": {"max_surge": 0, "max_unavailable": 0}}, "update: max_surge and max_unavailable are both 0"),
    ({"placement": {"max_per_node": 0}}, "placement.max_per_node: Input should be greater than or equal to 1"),
    ({"env": {"A=B": "1"}}, "env: 'A=B' is not a variable name"),
    ({"time_limit_s": 0}, "time_limit_s: Input should be greater than or equal to 1"),
])
def test_bad_specs_are_refused_naming_the_field(changes, expected):
    lines = refusal(spec_with(**changes))
    assert any(line.startswith(expected) for line in lines), lines


def test_every_problem_is_one_line():
    lines = refusal(spec_with(colour="blue", replicas=-1, ports=[{"name": "http", "port": 70000}]))
    assert len(lines) == 3, lines
    assert {line.split(":")[0] for line in lines} == {"colour", "replicas", "ports[0].port"}


def test_location_writes_toml_key_paths():
    assert location(("ports", 1, "port")) == "ports[1].port"
    assert location(("probes", "readiness", "http", "path")) == "probes.readiness.http.path"
    assert location(()) == ""


GOOD_FILE = """\
name = "hello"
command = ["python3", "-m", "http.server", "--bind", "127.0.0.1"]
replicas = 2

[env]
GREETING = "hi"

[[ports]]
name = "http"

[probes.readiness]
http = { path = "/", port = "http" }
period_s = 1
"""


def test_a_toml_file_maps_to_the_spec_and_workdir_is_the_current_directory_as_sbatchs(tmp_path: Path, monkeypatch):
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "svc.toml"
    path.write_text(GOOD_FILE)
    monkeypatch.chdir(tmp_path)
    spec = load_service_file(path)
    assert spec.name == "hello" and spec.replicas == 2 and spec.env == {"GREETING": "hi"}
    assert spec.workdir == str(tmp_path)
    assert load_service_file(path, cwd=tmp_path / "conf").workdir == str(tmp_path / "conf")
    assert spec.probes.readiness is not None and spec.probes.readiness.http is not None
    assert spec.probes.readiness.http.port == "http"


def test_a_relative_workdir_is_taken_from_the_files_directory(tmp_path: Path):
    spec = parse_service('workdir = "app/../site"\n' + GOOD_FILE, "svc.toml", tmp_path)
    assert spec.workdir == str(tmp_path / "site")


@pytest.mark.parametrize(("text", "expected"), [
    (GOOD_FILE + "\n[[ports]]\nname = \"admin\"\nport = 70000\n",
     "svc.toml: ports[1].port: 70000 is not a port (1-65535, or 0: any free port on the node)"),
    (GOOD_FILE.replace('port = "http" }', 'port = "grpc" }'),
     "svc.toml: probes.readiness.http.port: 'grpc' is not one of the service's ports"),
    (GOOD_FILE + "\n[probes.readiness.http]\n", "svc.toml: not valid TOML:"),
    (GOOD_FILE.replace("replicas = 2", "replica = 2"), "svc.toml: replica: unknown field"),
    ("name = 'x'\ncommand = 'serve'\n", "svc.toml: command: Input should be a valid list"),
])
def test_bad_toml_files_name_the_key(tmp_path: Path, text: str, expected: str):
    with pytest.raises(ServiceFileError) as info:
        parse_service(text, "svc.toml", tmp_path)
    assert any(line.startswith(expected) for line in info.value.lines), info.value.lines


def test_an_unreadable_file_says_so(tmp_path: Path):
    with pytest.raises(ServiceFileError, match="missing.toml: cannot be read"):
        load_service_file(tmp_path / "missing.toml")
