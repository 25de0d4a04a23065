"""Services end to end (issue 22, "How it is checked"): a real controller and agents (tests/e2e/harness.py),
a real `corral gateway` in front of them, a small HTTP app (service_app.py) as the replicas, applied as a
real Unix user. Load is bounded: one client sending GETs one after the other through the gateway."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import API, Cluster, free_port, wait_for

pytestmark = pytest.mark.slow

USER = "svcint-e2e"
# The harness's own settings, and QOS `high` that may preempt `low` (the preemption test's).
CONFIG = """
kill_grace_s = 2
node_timeout_s = 15
[[qos]]
name = "low"
grace_s = 2
[[qos]]
name = "normal"
priority = 5
[[qos]]
name = "high"
priority = 10
preempts = ["low"]
"""
APP = Path(__file__).parent / "service_app.py"


@pytest.fixture(scope="module")
def unix_user() -> Iterator[str]:
    subprocess.run(["userdel", USER], capture_output=True, check=False)
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
    try:
        yield USER
    finally:
        subprocess.run(["userdel", USER], capture_output=True, check=False)


@dataclass
class Served:
    cluster: Cluster
    gateway: subprocess.Popen
    url: str
    root: Path

    def apply(self, **spec) -> httpx.Response:
        body = {"user": USER, "command": [sys.executable, str(APP)], "workdir": str(self.root), "public": True,
                "env": {"PATH": os.environ["PATH"]}, "ports": [{"name": "http"}], **spec}
        return self.cluster.http.post(f"{API}/services", json=body)

    def show(self, name: str) -> dict:
        reply = self.cluster.http.get(f"{API}/services/{name}")
        assert reply.status_code == 200, reply.text
        return reply.json()

    def ready(self, name: str, count: int, revision: int | None = None) -> list[dict]:
        def enough() -> list[dict] | None:
            service = self.show(name)
            found = [r for r in service["replicas"] if r["ready"] and r["state"] == "RUNNING"
                     and (revision is None or r["revision"] == revision)]
            return found if len(found) >= count and service["ready_replicas"] >= count else None

        try:
            return wait_for(enough, 40, 0.2, f"{count} ready replicas of {name}")
        except AssertionError:
            raise AssertionError(f"{self.show(name)}\n{self.cluster.logs()}") from None

    def get(self, name: str, path: str = "/") -> httpx.Response:
        return httpx.get(f"{self.url}/s/{name}{path}", timeout=10)

    def delete(self, name: str) -> None:
        """Delete the service and wait until it is gone with its replicas: the next test gets free GPUs."""
        assert self.cluster.http.delete(f"{API}/services/{name}").status_code in (200, 204)
        wait_for(lambda: self.cluster.http.get(f"{API}/services/{name}").status_code == 404, 60, 0.2,
                 f"service {name} gone with its replicas")


@pytest.fixture(scope="module")
def served(tmp_path_factory, unix_user) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("services")
    root.chmod(0o755)
    cluster = Cluster(root, nodes=2, gpus=2, config=CONFIG).start()
    port = free_port()
    gateway = subprocess.Popen(
        [sys.executable, "-m", "corral.cli.main", "gateway", "--controller", cluster.url, "--port", str(port),
         "--secret-file", str(cluster.secret_file), "--report-every-s", "1"],
        stdout=open(root / "gateway.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: _listening(port), 20, message="the gateway listening")
        yield Served(cluster, gateway, f"http://127.0.0.1:{port}", root)
    finally:
        os.killpg(gateway.pid, signal.SIGTERM)
        gateway.wait(timeout=10)
        cluster.stop()


def _listening(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@dataclass
class Load:
    """One client's GETs, one after the other, through the gateway, until stopped."""

    url: str
    answers: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> "Load":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                began = time.monotonic()
                try:
                    reply = client.get(self.url)
                    if reply.status_code == 200:
                        self.answers.append(reply.text.strip())
                    else:
                        self.failures.append(f"{reply.status_code} {reply.text.strip()}")
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                self.latencies_s.append(time.monotonic() - began)
                time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def p99_ms(self) -> float:
        ordered = sorted(self.latencies_s)
        return 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0


PROBES = {"readiness": {"http": {"path": "/health", "port": "http"}, "period_s": 0.5}}


def test_two_replicas_answer_through_the_gateway_from_both_and_stream_tokens(served):
    assert served.apply(name="hello", replicas=2, probes=PROBES).status_code == 201
    ready = served.ready("hello", 2)
    jobs = {str(r["job_id"]) for r in ready}
    seen = {served.get("hello").text.split()[1] for _ in range(20)}
    assert seen == jobs, "least in-flight over both ready replicas"
    with httpx.stream("GET", f"{served.url}/s/hello/stream", timeout=10) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        arrivals = [(time.monotonic(), line) for line in reply.iter_lines() if line.startswith("data:")]
    assert [line.split()[1] for _t, line in arrivals] == [f"token{i}" for i in range(5)]
    assert arrivals[-1][0] - arrivals[0][0] >= 0.3, "streamed as written, not buffered to the end"
    served.delete("hello")


def test_a_killed_replica_fails_no_request_and_is_back_within_its_backoff(served):
    assert served.apply(name="crashy", replicas=2, probes=PROBES,
                        restart={"backoff_initial_s": 1, "backoff_max_s": 4}).status_code == 201
    victim = served.ready("crashy", 2)[0]
    pid = int((served.root / f"pid-{victim['job_id']}").read_text())
    with Load(f"{served.url}/s/crashy/") as load:
        time.sleep(1)
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: any(r["job_id"] == victim["job_id"] and r["restarts"] >= 1 and r["ready"]
                             for r in served.show("crashy")["replicas"]), 30, 0.2, "the replica back")
        back_s = time.monotonic() - killed
        time.sleep(0.5)
    print(f"crash: {len(load.answers) + len(load.failures)} requests, {len(load.failures)} failed, "
          f"p99 {load.p99_ms():.0f} ms, replica back after {back_s:.1f} s")
    assert load.failures == [] and len(load.answers) > 20
    assert back_s < 1 + 15, "back within its 1 s backoff plus a start and a readiness probe"
    assert any("replica" in line and "restarted" in line for line in served.show("crashy")["history"])
    served.delete("crashy")


def test_a_failing_liveness_probe_restarts_the_replica_and_says_why(served):
    probes = {**PROBES, "liveness": {"http": {"path": "/health", "port": "http"}, "period_s": 0.5,
                                     "failure_threshold": 2}}
    assert served.apply(name="sickly", replicas=1, probes=probes, restart={"backoff_initial_s": 1}).status_code == 201
    [replica] = served.ready("sickly", 1)
    (served.root / f"sick-{replica['job_id']}").write_text("")
    said = "liveness probe failed 2 times: HTTP 500"
    wait_for(lambda: any(said in line for line in served.show("sickly")["history"]), 30, 0.2,
             "the liveness restart in the history")
    (served.root / f"sick-{replica['job_id']}").unlink()
    wait_for(lambda: served.show("sickly")["replicas"][0]["restarts"] >= 1, 30, 0.2, "restarted")
    served.ready("sickly", 1)
    served.delete("sickly")


def test_a_rolling_update_switches_every_response_with_zero_failures(served):
    assert served.apply(name="rolling", replicas=2, probes=PROBES, env={"PATH": os.environ["PATH"],
                                                                         "VERSION": "v1"}).status_code == 201
    served.ready("rolling", 2)
    with Load(f"{served.url}/s/rolling/") as load:
        time.sleep(1)
        updated = served.apply(name="rolling", replicas=2, probes=PROBES,
                               env={"PATH": os.environ["PATH"], "VERSION": "v2"})
        assert updated.json()["outcome"] == "updated"
        revision = updated.json()["revision"]
        wait_for(lambda: {r["revision"] for r in served.show("rolling")["replicas"]} == {revision}
                 and served.show("rolling")["ready_replicas"] == 2, 60, 0.2, "the update done")
        time.sleep(1)
    print(f"update: {len(load.answers) + len(load.failures)} requests, {len(load.failures)} failed, "
          f"p99 {load.p99_ms():.0f} ms")
    assert load.failures == []
    versions = [answer.split()[0] for answer in load.answers]
    assert versions[0] == "v1" and versions[-1] == "v2"
    switched = versions.index("v2")
    assert set(versions[switched:]) <= {"v1", "v2"}
    assert {served.get("rolling").text.split()[0] for _ in range(10)} == {"v2"}, "every response switched"
    served.delete("rolling")


def test_scaling_up_under_load_adds_a_replica_and_down_when_it_stops(served):
    # A short scale-down window, so the scale-down comes within the wait below (the default is 60 s).
    autoscale = {"min_replicas": 1, "max_replicas": 3, "target_inflight": 1, "scale_down_window_s": 3}
    assert served.apply(name="elastic", replicas=1, probes=PROBES, autoscale=autoscale).status_code == 201
    served.ready("elastic", 1)
    loads = [Load(f"{served.url}/s/elastic/slow") for _ in range(3)]
    onset = time.monotonic()
    for load in loads:
        load.__enter__()
    try:
        served.ready("elastic", 2)
        scaled_s = time.monotonic() - onset
    finally:
        for load in loads:
            load.__exit__()
    print(f"autoscale: load onset to a second ready replica {scaled_s:.1f} s; "
          f"{sum(len(load.failures) for load in loads)} of {sum(len(load.answers) for load in loads)} failed")
    assert all(load.failures == [] for load in loads)
    assert any("autoscaled" in line for line in served.show("elastic")["history"])
    wait_for(lambda: served.show("elastic")["desired_replicas"] == 1, 30, 0.2, "back to min_replicas")
    served.delete("elastic")


def test_killing_an_agent_reschedules_its_replicas(served):
    """With `spread`, one replica per node while both are up; the lost node's replica then moves beside its
    sibling, since spread counts only the nodes that can take work when it is placed."""
    assert served.apply(name="moving", replicas=2, probes=PROBES, placement={"spread": True}).status_code == 201
    ready = served.ready("moving", 2)
    assert len({r["node"] for r in ready}) == 2, ready
    lost_node = ready[0]["node"]
    lost = {r["index"] for r in ready if r["node"] == lost_node}
    other = next(n for n in ("node1", "node2") if n != lost_node)
    served.cluster.kill_agent(lost_node)
    try:
        began = time.monotonic()
        wait_for(lambda: {r["index"] for r in served.show("moving")["replicas"] if r["ready"] and r["node"] == other}
                 >= lost, 60, 0.5, f"the lost node's replicas ready on {other}")
        print(f"agent killed: its replicas ready elsewhere after {time.monotonic() - began:.1f} s "
              "(node_timeout_s 15)")
        assert {served.get("moving").status_code for _ in range(10)} == {200}
    finally:
        served.cluster.start_agent(lost_node)
        wait_for(lambda: any(n["name"] == lost_node and n["state"] != "down" for n in served.cluster.nodes()), 30)
    served.delete("moving")


def test_a_batch_gang_in_a_preempting_qos_takes_the_services_gpus_and_the_service_returns(served):
    assert served.apply(name="gpuweb", replicas=2, gpus_per_node=2, qos="low", probes=PROBES).status_code == 201
    first = {r["job_id"] for r in served.ready("gpuweb", 2)}
    gang = served.cluster.submit(argv=["sleep", "3"], qos="high", nodes=2, gpus_per_node=2)
    job = served.cluster.wait_state(gang, "RUNNING", "COMPLETED", timeout_s=40)
    assert job["state"] in ("RUNNING", "COMPLETED")
    assert served.cluster.wait_state(gang, "COMPLETED", timeout_s=40)["exit_code"] == 0
    back = served.ready("gpuweb", 2)
    assert {r["job_id"] for r in back} == first, "the same replicas (jobs), requeued and started again"
    assert all(r["restarts"] >= 1 for r in back)
    assert {served.get("gpuweb").status_code for _ in range(5)} == {200}
    served.delete("gpuweb")


@pytest.mark.parametrize(("change", "words"), [
    ({"colour": "blue"}, "colour: unknown field"),
    ({"ports": [{"name": "http", "port": 70000}]}, "ports[0].port: 70000 is not a port"),
    ({"probes": {"readiness": {"tcp": {"port": "grpc"}}}}, "probes.readiness.tcp.port: 'grpc' is not one of"),
    ({"gpus_per_node": 64}, "gpus_per_node=64: no replica can ever fit"),
])
def test_bad_specs_are_refused_naming_the_field_and_nothing_is_applied(served, change, words):
    reply = served.apply(name="bad", replicas=2, **change)
    assert reply.status_code == 422 and words in reply.json()["detail"], reply.text
    assert served.cluster.http.get(f"{API}/services/bad").status_code == 404
    assert not [j for j in served.cluster.http.get(f"{API}/jobs").json() if j["name"] == "bad"]
