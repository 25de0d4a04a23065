"""Job steps through the Agent: LaunchStep from the (fake, real-HTTP) controller, I/O to a real srun end
(StepStreams), StepFinished through the event outbox, step-scoped signals."""
from __future__ import annotations

import asyncio
import io
import signal

import pytest

from corral.protocol import SignalJob, StepFinished, TaskExit
from corral.slurm.srun.step_streams import StepStreams


@pytest.fixture
def streams():
    made: list[StepStreams] = []

    def make(**kwargs) -> StepStreams:
        kwargs.setdefault("input", "none")
        kwargs.setdefault("stdout", io.BytesIO())
        kwargs.setdefault("stderr", io.BytesIO())
        made.append(StepStreams(host="127.0.0.1", **kwargs).start())
        return made[-1]

    yield make
    for one in made:
        one.close()


def io_fields(side: StepStreams) -> dict:
    return dict(io_host=side.host, io_port=side.port, io_token=side.token)


def step_finished(controller, job_id: int, step_id: int) -> StepFinished | None:
    found = [e for e in list(controller.events)
             if isinstance(e, StepFinished) and (e.job_id, e.step_id) == (job_id, step_id)]
    return found[-1] if found else None


def test_step_runs_reports_and_shows_in_registration(controller, run_with_agent, make_step, streams):
    out = io.BytesIO()
    side = streams(stdout=out)

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        side.expect({"n1": [0]})
        launch = make_step(job_id=30, step_id=2, argv=["sh", "-c", "echo from the step; exec sleep 30"],
                           **io_fields(side))
        controller.send(launch)
        controller.send(launch)  # re-sent: ignored
        await controller.until(lambda: agent.running_steps == [(30, 2)])
        assert agent.running_jobs == [30]  # only a step of job 30 runs here
        controller.restart("epoch-2")  # registers again, reporting the step
        await controller.until(lambda: len(controller.registrations) == 2)
        controller.send(SignalJob(job_id=30, signal=signal.SIGKILL, grace_s=0, target="steps"))
        await controller.until(lambda: step_finished(controller, 30, 2), timeout_s=5)
        assert agent.running_steps == [] and agent.running_jobs == []

    run_with_agent(scenario)
    assert controller.registrations[1].running_steps == [(30, 2)]
    assert controller.registrations[1].running_jobs == [30]
    assert step_finished(controller, 30, 2).tasks == [TaskExit(rank=0, exit_code=0, signal=signal.SIGKILL)]
    assert len([e for e in controller.events if isinstance(e, StepFinished)]) == 1
    assert side.wait(5) and out.getvalue() == b"from the step\n"


def test_signal_for_steps_reaches_the_step_and_not_the_batch(controller, run_with_agent, make_launch, make_step,
                                                              streams):
    side = streams()

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=31, argv=["sleep", "30"]))
        await controller.until(lambda: controller.started(31))
        side.expect({"n1": [0]})
        controller.send(make_step(job_id=31, step_id=0, argv=["sleep", "30"], **io_fields(side)))
        await controller.until(lambda: agent.running_steps == [(31, 0)])
        controller.send(SignalJob(job_id=31, signal=signal.SIGTERM, grace_s=2, target="steps", step_id=1))
        await asyncio.sleep(0.3)
        assert step_finished(controller, 31, 0) is None  # another step id: not this one
        controller.send(SignalJob(job_id=31, signal=signal.SIGTERM, grace_s=2, target="steps"))
        await controller.until(lambda: step_finished(controller, 31, 0))
        await asyncio.sleep(0.3)
        assert controller.finished(31) is None and agent.running_jobs == [31]  # the batch runs on
        controller.send(SignalJob(job_id=31, signal=signal.SIGKILL, grace_s=0, target="batch"))
        await controller.until(lambda: controller.finished(31))

    run_with_agent(scenario)
    assert step_finished(controller, 31, 0).tasks == [TaskExit(rank=0, exit_code=0, signal=signal.SIGTERM)]
    assert controller.finished(31).tasks == [TaskExit(rank=0, exit_code=0, signal=signal.SIGKILL)]
    assert side.wait(5) and side.exits == {0: (0, signal.SIGTERM)}


def test_signal_for_the_whole_job_reaches_its_steps(controller, run_with_agent, make_launch, make_step, streams):
    first, second = streams(), streams()

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=32, argv=["sleep", "30"]))
        for step_id, side in enumerate((first, second)):
            side.expect({"n1": [0]})
            controller.send(make_step(job_id=32, step_id=step_id, argv=["sleep", "30"], **io_fields(side)))
        await controller.until(lambda: len(agent.running_steps) == 2)
        controller.send(SignalJob(job_id=32, signal=signal.SIGTERM, grace_s=2))
        await controller.until(lambda: controller.finished(32) and step_finished(controller, 32, 0)
                               and step_finished(controller, 32, 1))

    run_with_agent(scenario)
    for step_id in (0, 1):
        assert step_finished(controller, 32, step_id).tasks == [
            TaskExit(rank=0, exit_code=0, signal=signal.SIGTERM)]
    assert controller.finished(32).tasks == [TaskExit(rank=0, exit_code=0, signal=signal.SIGTERM)]


def test_step_that_cannot_reach_srun_is_reported(controller, run_with_agent, make_step, streams):
    side = streams()
    port = side.port
    side.close()  # srun went away before its step started

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_step(job_id=33, io_host="127.0.0.1", io_port=port, io_token="x"))
        await controller.until(lambda: step_finished(controller, 33, 0), timeout_s=5)

    run_with_agent(scenario)
    finished = step_finished(controller, 33, 0)
    assert f"cannot connect to srun at 127.0.0.1:{port}: " in finished.error
