"""The agent holds every controller's URL and talks to their leader (issue 13), against FakeControllers
that answer as a leader or, with `standby` set, as a standby does under the HA contract (a stand-in: the
controller side comes on its own branch, and the end-to-end tests against real controllers with it)."""
from __future__ import annotations

import asyncio

import pytest

from corral.agent.agent import Agent
from corral.agent.discovery import discover

from .conftest import FakeController


@pytest.fixture
def second_controller():
    ctl = FakeController()
    ctl.epoch = "epoch-b"
    ctl.start()
    yield ctl
    if ctl._server is not None:
        ctl.stop()


def run_agent(urls, tmp_path, agent_env, scenario) -> Agent:
    agent = Agent(controller_url=urls, secret="test-secret", node="n1", inventory=discover(2, cpus=4, mem_mib=4096),
                  spool_dir=tmp_path / "spool", base_env=agent_env)

    async def main() -> None:
        task = asyncio.create_task(agent.run())
        try:
            await scenario(agent)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    return agent


def test_the_agent_moves_to_the_leader_a_standby_names_and_follows_a_failover(
        controller, second_controller, tmp_path, agent_env, make_launch):
    a, b = controller, second_controller
    a.standby, a.leader = True, b.url

    async def scenario(agent):
        await b.until(lambda: b.polls)
        assert agent.controller_url == b.url and a.registrations == []
        # b dies; a wins the election with its own epoch: the agent registers there and works on.
        b.stop()
        a.standby, a.leader = False, None
        await a.until(lambda: a.polls and a.polls[-1][1] == "epoch-1", timeout_s=10)
        a.send(make_launch(job_id=21, argv=["true"]))
        await a.until(lambda: a.finished(21), timeout_s=10)
        assert agent.controller_url == a.url

    run_agent([a.url, b.url], tmp_path, agent_env, scenario)
    assert len(b.registrations) == 1 and len(a.registrations) == 1
    assert [type(e).__name__ for e in a.events] == ["NodeStarted", "NodeFinished"]


def test_during_an_election_the_agent_keeps_asking_until_a_leader_answers(
        controller, second_controller, tmp_path, agent_env):
    a, b = controller, second_controller
    a.standby = b.standby = True  # neither knows a leader yet

    async def scenario(agent):
        await asyncio.sleep(0.8)
        assert a.registrations == [] and b.registrations == []
        b.standby = False
        await b.until(lambda: b.polls, timeout_s=10)

    agent = run_agent([a.url, b.url], tmp_path, agent_env, scenario)
    assert agent.controller_url == b.url and len(b.registrations) == 1


def test_one_controller_down_at_start_is_skipped(controller, tmp_path, agent_env):
    from tests.ha_standin import nothing_listening

    async def scenario(agent):
        await controller.until(lambda: controller.polls, timeout_s=10)

    agent = run_agent([nothing_listening(), controller.url], tmp_path, agent_env, scenario)
    assert agent.controller_url == controller.url
