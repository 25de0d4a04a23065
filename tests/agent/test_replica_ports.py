"""Service replicas' ports (agent/ports.py, agent/replicas.py) through a real agent: each named port reaches
the tasks as CORRAL_PORT_<NAME> and PORT and the controller in NodeStarted.ports; ports are unique on a node
under concurrent launches, held until the replica ends, kept by a restarted agent; a taken port fails the
launch naming it, and nothing is held for a refused launch."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from corral.agent.ports import PortBook, PortUnavailable
from corral.protocol import HttpCheckSpec, PortRequest, ProbeSpec, ProbesReported, ProbesSpec, SignalJob

APP = Path(__file__).with_name("probe_app.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ports(*names: str, **fixed: int) -> list[PortRequest]:
    return [PortRequest(name=name) for name in names] + [PortRequest(name=n, port=p) for n, p in fixed.items()]


def test_each_named_port_reaches_the_tasks_and_the_controller(controller, run_with_agent, make_launch, tmp_path):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=61, ports=ports("http", "metrics"),
                                    argv=["sh", "-c", "env | grep -E '^(CORRAL_)?PORT' | sort > env.txt"]))
        await controller.until(lambda: controller.finished(61))

    run_with_agent(scenario)
    given = controller.started(61).ports
    assert list(given) == ["http", "metrics"] and given["http"] != given["metrics"]
    assert (tmp_path / "env.txt").read_text().splitlines() == [
        f"CORRAL_PORT_HTTP={given['http']}", f"CORRAL_PORT_METRICS={given['metrics']}", f"PORT={given['http']}"]
    assert controller.finished(61).error is None


def test_concurrent_launches_on_one_node_never_share_a_port(controller, run_with_agent, make_launch):
    jobs = range(70, 78)

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        for job_id in jobs:  # one command batch: the agent takes them all at once
            controller.send(make_launch(job_id=job_id, ports=ports("http", "admin"), argv=["sleep", "30"]))
        await controller.until(lambda: all(controller.started(j) for j in jobs), timeout_s=10)
        for job_id in jobs:
            controller.send(SignalJob(job_id=job_id, signal=9, grace_s=1))
        await controller.until(lambda: all(controller.finished(j) for j in jobs), timeout_s=10)

    run_with_agent(scenario)
    given = [port for j in jobs for port in controller.started(j).ports.values()]
    assert len(given) == 16 and len(set(given)) == 16, given


def test_a_fixed_port_in_use_on_the_node_fails_the_launch_naming_it(controller, run_with_agent, make_launch,
                                                                   tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        async def scenario(agent):
            await controller.until(lambda: controller.polls)
            controller.send(make_launch(job_id=62, ports=ports(http=port), argv=["touch", "ran"]))
            await controller.until(lambda: controller.finished(62))

        run_with_agent(scenario)
    assert controller.finished(62).error == f"port {port} (http) is already in use on n1"
    assert controller.started(62) is None and not (tmp_path / "ran").exists()


def test_a_fixed_port_is_held_until_its_replica_ends_then_given_again(controller, run_with_agent, make_launch):
    port = free_port()

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=63, ports=ports(http=port), argv=["sleep", "30"]))
        await controller.until(lambda: controller.started(63))
        # The replica has not bound its port (yet): the agent still knows it gave it away.
        controller.send(make_launch(job_id=64, ports=ports("admin", http=port), argv=["true"]))
        await controller.until(lambda: controller.finished(64))
        controller.send(SignalJob(job_id=63, signal=9, grace_s=1))
        await controller.until(lambda: controller.finished(63))
        controller.send(make_launch(job_id=65, ports=ports(http=port), argv=["true"]))
        await controller.until(lambda: controller.finished(65))

    run_with_agent(scenario)
    assert controller.finished(64).error == f"port {port} (http) is already given to job 63 on n1"
    assert controller.started(65).ports == {"http": port}
    assert controller.finished(65).error is None


def test_a_probe_naming_a_port_the_launch_lacks_fails_the_launch(controller, run_with_agent, make_launch):
    probes = ProbesSpec(readiness=ProbeSpec(http=HttpCheckSpec(path="/", port="web")))

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=66, ports=ports("http"), probes=probes, argv=["true"]))
        await controller.until(lambda: controller.finished(66))

    run_with_agent(scenario)
    assert controller.finished(66).error == \
        "the readiness probe's port 'web' is not one of the replica's ports (http)"


def test_a_restarted_agent_keeps_its_replicas_ports_and_probes_them_again(controller, run_with_agent, make_launch,
                                                                         tmp_path):
    probes = ProbesSpec(readiness=ProbeSpec(http=HttpCheckSpec(path="/", port="http"), period_s=0.1))
    argv = [sys.executable, str(APP)]

    async def first(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=67, ports=ports("http"), probes=probes, argv=argv))
        await controller.until(lambda: controller.events_of(ProbesReported, 67), timeout_s=10)

    async def second(agent):
        await controller.until(lambda: len(controller.events_of(ProbesReported, 67)) == 2, timeout_s=10)
        port = controller.started(67).ports["http"]
        controller.send(make_launch(job_id=68, ports=ports(http=port), argv=["true"]))
        await controller.until(lambda: controller.finished(68))
        controller.send(SignalJob(job_id=67, signal=9, grace_s=1))
        await controller.until(lambda: controller.finished(67), timeout_s=5)

    run_with_agent(first)
    run_with_agent(second)  # the same spool: it adopts job 67
    port = controller.started(67).ports["http"]
    assert controller.finished(68).error == f"port {port} (http) is already given to job 67 on n1"
    assert [r.ready for r in controller.events_of(ProbesReported, 67)] == [True, True]


def test_a_reservation_is_all_or_nothing():
    book = PortBook("n1")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortUnavailable, match=f"port {port} \\(b\\) is already in use on n1"):
            book.reserve(1, ports("a", b=port))
    assert book.held_by(1) == {}, "the first port was let go"
    with pytest.raises(PortUnavailable, match="names a port twice"):
        book.reserve(2, ports("http", "HTTP"))
    given = book.reserve(3, ports("a", "b"))
    assert set(book.held_by(3)) == set(given.values())
    book.release(3)
    assert book.held_by(3) == {}


def test_a_fixed_port_bound_on_one_address_only_is_in_use():
    with socket.socket(socket.AF_INET6) as taken:
        taken.bind(("::1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortUnavailable, match="already in use"):
            PortBook("n1").reserve(1, ports(http=port))


def test_ports_held_are_never_given_again_while_held():
    """The kernel may offer a port it just offered (nobody bound it); the book picks again."""
    book = PortBook("n1")
    chosen = [book.reserve(job, ports("a"))["a"] for job in range(300)]
    assert len(set(chosen)) == 300
