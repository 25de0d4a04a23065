"""The Agent against a small real HTTP controller (see conftest.FakeController)."""
from __future__ import annotations

import asyncio
import signal

from corral.agent import agent as agent_module
from corral.protocol import GpuShareLaunch, NodeStarted, SignalJob, StepFinished, TaskExit, TaskLaunch

EXITED_OK = TaskExit(rank=0, exit_code=0)


def test_registers_with_inventory_and_secret(controller, run_with_agent):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)

    run_with_agent(scenario)
    (registration,) = controller.registrations
    assert controller.auth_headers == ["Bearer test-secret"]
    assert (registration.node, registration.address, registration.cpus, registration.mem_mib) == (
        "n1", "127.0.0.1", 4, 4096)
    assert [g.domain for g in registration.gpus] == ["nvl0", "nvl1"]
    assert registration.running_jobs == [] and registration.finished_jobs == []
    assert controller.polls[0] == (0, "epoch-1")


def test_wrong_secret_keeps_retrying(controller, run_with_agent):
    async def scenario(agent):
        await asyncio.sleep(0.5)

    run_with_agent(scenario, secret="wrong")
    assert controller.registrations == [] and controller.polls == []


def test_launch_reports_started_then_finished(controller, run_with_agent, make_launch, tmp_path):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=11, argv=["sh", "-c", "echo hello"], output="out-%j"))
        await controller.until(lambda: controller.finished(11))

    run_with_agent(scenario)
    kinds = [type(e).__name__ for e in controller.events]
    assert kinds == ["NodeStarted", "NodeFinished"]
    assert controller.finished(11).tasks == [EXITED_OK]
    assert (tmp_path / "out-11").read_text() == "hello\n"
    assert controller.polls[-1][0] == 1  # the launch command was acknowledged


def test_a_start_waits_for_a_short_tasks_end_and_both_go_in_one_request(controller, run_with_agent, make_launch,
                                                                          monkeypatch):
    monkeypatch.setattr(agent_module, "START_LINGER_S", 30.0)  # the end, not the linger, sends them

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=41, argv=["true"]))
        await controller.until(lambda: controller.finished(41), timeout_s=20.0)

    run_with_agent(scenario)
    assert controller.event_batches == [["NodeStarted", "NodeFinished"]]


def test_a_start_alone_goes_after_the_linger_not_at_the_tasks_end(controller, run_with_agent, make_launch):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=42, argv=["sleep", "30"]))
        await controller.until(lambda: controller.events_of(NodeStarted, 42), timeout_s=10.0)
        assert not controller.finished(42)
        controller.send(SignalJob(job_id=42, signal=signal.SIGKILL, grace_s=0))
        await controller.until(lambda: controller.finished(42), timeout_s=10.0)

    run_with_agent(scenario)
    assert controller.event_batches == [["NodeStarted"], ["NodeFinished"]]


def test_resent_launch_is_ignored(controller, run_with_agent, make_launch, tmp_path):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        launch = make_launch(job_id=12, argv=["sh", "-c", "echo run >> runs"])
        controller.send(launch)
        controller.send(launch)  # the controller may send a command twice
        await controller.until(lambda: controller.finished(12))
        controller.send(launch)  # or again once it finished here
        await asyncio.sleep(0.3)

    run_with_agent(scenario)
    assert (tmp_path / "runs").read_text() == "run\n"
    assert len(controller.events_of(NodeStarted, 12)) == 1


def test_requeued_job_runs_again(controller, run_with_agent, make_launch, tmp_path):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=13, argv=["sh", "-c", "echo $SLURM_RESTART_COUNT >> runs"]))
        await controller.until(lambda: controller.finished(13))
        controller.send(make_launch(job_id=13, restart_count=1, argv=["sh", "-c", "echo $SLURM_RESTART_COUNT >> runs"]))
        await controller.until(lambda: len(controller.events_of(NodeStarted, 13)) == 2 and
                               len(controller.events) == 4)

    run_with_agent(scenario)
    assert (tmp_path / "runs").read_text() == "\n1\n"


def test_signal_command_kills_the_job(controller, run_with_agent, make_launch):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=14, argv=["sleep", "30"]))
        await controller.until(lambda: controller.started(14))
        controller.send(SignalJob(job_id=14, signal=signal.SIGTERM, grace_s=2))
        await controller.until(lambda: controller.finished(14))

    run_with_agent(scenario)
    assert controller.finished(14).tasks == [TaskExit(rank=0, exit_code=0, signal=signal.SIGTERM)]


def test_a_draining_replicas_signal_waits_its_drain_delay(controller, run_with_agent, make_launch, tmp_path):
    """The gateway stops routing to a replica being stopped before its SIGTERM: the agent holds the signal
    for `drain_s`, and the replica serves until then."""
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=16, argv=["sh", "-c", "trap 'echo TERM >> seen; exit 0' TERM; "
                                                                  "while true; do sleep 0.05; done"]))
        await controller.until(lambda: controller.started(16))
        await asyncio.sleep(0.2)  # the trap is set
        sent = asyncio.get_running_loop().time()
        controller.send(SignalJob(job_id=16, signal=signal.SIGTERM, grace_s=2, drain_s=1.0))
        await asyncio.sleep(0.7)
        assert not (tmp_path / "seen").exists(), "signalled before its drain delay"
        await controller.until(lambda: controller.finished(16))
        took[0] = asyncio.get_running_loop().time() - sent

    took = [0.0]
    run_with_agent(scenario)
    assert (tmp_path / "seen").read_text() == "TERM\n" and took[0] >= 1.0
    assert controller.finished(16).tasks == [EXITED_OK]


def test_spawn_failure_is_reported(controller, run_with_agent, make_launch):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=15, argv=["/no/such/program"]))
        await controller.until(lambda: controller.finished(15))

    run_with_agent(scenario)
    finished = controller.finished(15)
    assert "command not found" in finished.error and finished.tasks[0].exit_code == 127
    assert controller.started(15) is None


def test_controller_restart_triggers_reregistration_with_running_jobs(controller, run_with_agent, make_launch):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=21, argv=["sleep", "1"]))
        await controller.until(lambda: controller.started(21))
        controller.restart("epoch-2")  # the next poll gets 409
        await controller.until(lambda: len(controller.registrations) == 2)
        await controller.until(lambda: controller.finished(21))

    run_with_agent(scenario)
    again = controller.registrations[1]
    assert again.running_jobs == [21] and again.finished_jobs == []
    assert controller.finished(21).tasks == [EXITED_OK]
    assert controller.polls[-1] == (0, "epoch-2")  # command numbering starts over with the new epoch


def test_events_are_retried_while_the_controller_is_unreachable(controller, run_with_agent, make_launch):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=22, argv=["sleep", "0.3"]))
        await controller.until(lambda: controller.started(22))
        controller.stop()
        await asyncio.sleep(1.0)  # the job finishes while nobody listens
        assert agent.unacknowledged_finished_jobs == [22]
        controller.start()
        await controller.until(lambda: controller.finished(22), timeout_s=4)

    run_with_agent(scenario)
    assert len(controller.registrations) == 1  # same epoch: no need to register again
    assert controller.finished(22).tasks == [EXITED_OK]


def test_restart_while_away_reports_unacknowledged_finished_jobs(controller, run_with_agent, make_launch):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=23, argv=["sleep", "0.2"]))
        await controller.until(lambda: controller.started(23))
        controller.stop()
        await asyncio.sleep(0.6)
        controller.restart("epoch-2")
        controller.start()
        await controller.until(lambda: controller.finished(23), timeout_s=4)

    run_with_agent(scenario)
    again = controller.registrations[-1]
    assert again.running_jobs == [] and again.finished_jobs == [23]


def test_registration_reply_kills_unwanted_jobs(controller, run_with_agent, make_launch):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=24, argv=["sleep", "30"]))
        await controller.until(lambda: controller.started(24))
        controller.kill_jobs = [24]  # e.g. requeued elsewhere while this node was silent
        controller.restart("epoch-2")
        await controller.until(lambda: controller.finished(24))

    run_with_agent(scenario)
    # SIGKILL, no SIGTERM and grace: the run was given away, and may be frozen (decision 0017).
    assert controller.finished(24).tasks == [TaskExit(rank=0, exit_code=0, signal=signal.SIGKILL)]


def test_a_launch_onto_gpus_a_live_task_of_another_job_holds_is_refused(controller, run_with_agent, make_launch,
                                                                        make_step, tmp_path):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=7, node_gpus=[0], argv=["sleep", "30"]))
        await controller.until(lambda: controller.started(7))
        controller.send(make_launch(job_id=8, node_gpus=[1, 0], tasks=[TaskLaunch(rank=0, local_rank=0, gpus=[1, 0])],
                                    argv=["sh", "-c", "echo ran > job8"]))
        controller.send(make_step(job_id=9, node_gpus=[0], argv=["sh", "-c", "echo ran > step9"]))
        controller.send(make_launch(job_id=10, node_gpus=[1], argv=["true"]))  # a free GPU: fine
        await controller.until(lambda: controller.finished(8) and controller.finished(10) and
                               controller.events_of(StepFinished, 9))
        assert agent.running_jobs == [7], "the job holding the GPU runs on"
        controller.send(SignalJob(job_id=7, signal=signal.SIGKILL, grace_s=0))
        await controller.until(lambda: controller.finished(7))

    run_with_agent(scenario)
    refused = controller.finished(8)
    assert refused.error == ("GPU 0 of node n1 still in use by job 7, whose tasks there have not exited: "
                             "refusing to start job 8 there")
    assert refused.tasks == [TaskExit(rank=0, exit_code=1)] and controller.started(8) is None
    (step,) = controller.events_of(StepFinished, 9)
    assert "GPU 0 of node n1 still in use by job 7" in step.error
    assert controller.finished(10).tasks == [TaskExit(rank=0, exit_code=0)]
    assert not (tmp_path / "job8").exists() and not (tmp_path / "step9").exists()


def test_shares_of_one_gpu_run_side_by_side_but_a_whole_gpu_launch_onto_it_is_refused(
        controller, run_with_agent, make_launch, tmp_path):
    share = GpuShareLaunch(gpu_milli=250, device_memory_mib=81920, shards=2)
    on_gpu0 = [TaskLaunch(rank=0, local_rank=0, gpus=[0])]

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=7, node_gpus=[0], share=share, tasks=on_gpu0, argv=["sleep", "30"]))
        await controller.until(lambda: controller.started(7))
        controller.send(make_launch(job_id=8, node_gpus=[0], share=share, tasks=on_gpu0,
                                    argv=["sh", "-c", "echo ran > job8"]))
        controller.send(make_launch(job_id=9, node_gpus=[0], tasks=on_gpu0, argv=["sh", "-c", "echo ran > job9"]))
        await controller.until(lambda: controller.finished(8) and controller.finished(9))
        controller.send(SignalJob(job_id=7, signal=signal.SIGKILL, grace_s=0))
        await controller.until(lambda: controller.finished(7))

    run_with_agent(scenario)
    assert controller.finished(8).tasks == [TaskExit(rank=0, exit_code=0)] and (tmp_path / "job8").exists()
    assert controller.finished(9).error.startswith("GPU 0 of node n1 still in use by job 7")
    assert not (tmp_path / "job9").exists()
