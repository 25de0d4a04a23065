"""An agent follows only the newest leader: it remembers the highest lease epoch a controller's reply carried
and neither takes commands from nor registers with a controller at a lower one (an old leader that was paused
or cut off and has not noticed that another took over)."""
from __future__ import annotations

import asyncio

from corral.protocol import NodeStarted


def test_commands_of_an_older_leader_are_refused(controller, run_with_agent, make_launch, tmp_path):
    async def scenario(agent):
        controller.leader_epoch = 5
        await controller.until(lambda: controller.polls)
        controller.leader_epoch = 4  # the old leader answers the next polls
        polled = len(controller.polls)
        controller.send(make_launch(job_id=41, argv=["sh", "-c", "echo ran > ran-41"]))
        await controller.until(lambda: len(controller.polls) > polled + 1)  # it had the launch at least once
        await asyncio.sleep(0.3)
        assert not controller.started(41) and not (tmp_path / "ran-41").exists()
        controller.leader_epoch = 6  # a newer leader sends it
        await controller.until(lambda: controller.finished(41))

    run_with_agent(scenario)
    assert (tmp_path / "ran-41").read_text() == "ran\n"
    assert len(controller.events_of(NodeStarted, 41)) == 1


def test_no_registration_with_an_older_leader(controller, run_with_agent):
    async def scenario(agent):
        controller.leader_epoch = 3
        await controller.until(lambda: controller.polls)
        controller.leader_epoch = 2
        controller.restart("epoch-old-leader")  # the next poll gets 409: the agent registers again
        await controller.until(lambda: len(controller.registrations) >= 3)  # and again: every reply refused
        assert agent._epoch == "epoch-1"
        controller.leader_epoch = 3
        await controller.until(lambda: agent._epoch == "epoch-old-leader")

    run_with_agent(scenario)
