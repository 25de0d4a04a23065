"""The live controller's start-time forecasts (controller/forecasts.py) reach the API and squeue --start."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from corral.api.tenancy import TenancySpec
from corral.controller.app import create_app
from corral.controller.forecasts import NEW_JOBS_AFTER_S, ForecastFailed, Forecasts
from corral.controller.restore import restore_engine
from corral.controller.service import ControllerService
from corral.core.model import NodeSlice, Request
from corral.engine import events as ev
from corral.engine.config import LIVE
from corral.engine.records import Job, JobSpec, JobState, NodeRun
from corral.sim.forecast import START_WINDOW, OnlineWindow, RuntimeModel, StartWindow, capture, forecast
from corral.slurm.squeue.main import squeue
from corral.store import Store
from tests.cli.standin import ServerThread
from tests.controller.conftest import CONFIG, SECRET, T0, Api, node

NOW = T0 + 100


def whole_node_job(job_id: int, running: bool = False) -> Job:
    spec = JobSpec(name="work", user="alice", request=Request(gpus_per_node=8, partition="gpu", time_limit_s=1000),
                   argv=("true",), account="a")
    job = Job(id=job_id, spec=spec, submit_time=T0 + job_id, reason="Resources")
    if running:
        job.state, job.reason, job.start_time = JobState.RUNNING, "None", T0 + 50
        job.slices = (NodeSlice("n1", tuple(range(8)), 1, 0),)
        job.runs = {"n1": NodeRun(started=True)}
    return job


def ended_job(job_id: int, ran_s: float) -> Job:
    job = whole_node_job(job_id)
    job.state, job.reason, job.start_time, job.end_time = JobState.COMPLETED, "None", T0 - 5000, T0 - 5000 + ran_s
    return job


@pytest.fixture
def queued(tmp_path):
    """service_with_queue's services, their forecast processes stopped after the test."""
    made: list[ControllerService] = []

    def make(warm: bool = True) -> ControllerService:
        made.append(service_with_queue(tmp_path, warm))
        return made[-1]

    yield make
    for service in made:
        service.forecasts.close()


def service_with_queue(tmp_path, warm: bool = True) -> ControllerService:
    """n1's 8 GPUs held by job 1 (started at T0 + 50, limit 1,000 s); jobs 2 and 3 each wait for the whole
    node. alice's earlier jobs (the store has them) ran a quarter of their limits."""
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    history = [ended_job(job_id, 250) for job_id in (11, 12, 13)]
    store.save(jobs=[whole_node_job(1, running=True), whole_node_job(2), whole_node_job(3), *history],
               nodes=[node("n1")])
    service = ControllerService(restore_engine(CONFIG, LIVE, store, NOW), store, clock=lambda: NOW)
    if warm:
        asyncio.run(service.forecasts.warm(service.recent_ended_jobs))
    return service


def test_forecasts_learn_from_the_store_at_start_and_from_each_job_that_ends(queued):
    service = queued(warm=False)
    assert service.forecasts.model.ratio("alice", 1000.0) == 1.0  # nothing learnt: the limit
    asyncio.run(service.forecasts.warm(service.recent_ended_jobs))
    assert service.forecasts.model.ratio("alice", 1000.0) == 0.25
    # Job 1 ends at NOW, 50 s after its start: committed, and learnt.
    asyncio.run(service._handle(ev.TasksFinished("n1", 1, ((0, 0, 0),))))
    assert service.store.get_job(1).state is JobState.COMPLETED
    assert sorted(service.forecasts.model._recent["alice"]) == [0.05, 0.25, 0.25, 0.25]


def test_pending_jobs_show_their_forecast_start_and_its_source(queued, tmp_path):
    service = queued()
    api = Api(create_app(service, SECRET))
    before = api.get("/jobs/2").json()
    assert before["estimated_start_source"] != "forecast"
    asyncio.run(service.forecasts.make(service.engine, NOW))
    # Job 1 is expected to end at T0 + 50 + 250; job 2 then runs 250 s.
    assert service.forecasts.starts == {2: T0 + 300, 3: T0 + 550}
    one = api.get("/jobs/2").json()
    assert (one["estimated_start"], one["estimated_start_source"]) == (T0 + 300, "forecast")
    earliest, latest = one["estimated_start_window"]
    assert [earliest, latest] == list(START_WINDOW.bounds(NOW, T0 + 300)) and earliest < T0 + 300 < latest
    assert before["estimated_start_window"] is None  # no forecast yet: no window
    listed = {j["id"]: j for j in api.get("/jobs").json()}
    assert (listed[3]["estimated_start"], listed[3]["estimated_start_source"]) == (T0 + 550, "forecast")
    assert (listed[1]["estimated_start"], listed[1]["estimated_start_source"]) == (None, None)  # running
    stored = {j["id"]: j for j in api.get("/jobs", params={"all": "true"}).json()}
    assert stored[2]["estimated_start"] == T0 + 300


def test_the_start_window_is_calibrated_online_from_the_forecast_jobs_that_start(tmp_path):
    """Job 2 is forecast at NOW to start at T0 + 300 (a wait of 200 s); job 1 runs long, so job 2 starts at
    T0 + 1,000 (a wait of 900 s): the forecasts and the window shown from then on have learnt that starts
    come late."""
    clock = [NOW]
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    store.save(jobs=[whole_node_job(1, running=True), whole_node_job(2), whole_node_job(3),
                     *(ended_job(job_id, 250) for job_id in (11, 12, 13))], nodes=[node("n1")])
    service = ControllerService(restore_engine(CONFIG, LIVE, store, NOW), store, clock=lambda: clock[0])
    forecasts = service.forecasts
    forecasts.calibration = OnlineWindow(START_WINDOW, keep=10, min_outcomes=1)
    try:
        asyncio.run(forecasts.warm(service.recent_ended_jobs))
        asyncio.run(forecasts.make(service.engine, NOW))
        assert forecasts.starts[2] == T0 + 300 and forecasts.window == START_WINDOW  # nothing started yet
        assert forecasts.calibration.forecasts_of(3) == [(NOW, T0 + 550)]
        clock[0] = T0 + 1000
        asyncio.run(service._handle(ev.NodeContacted("n1"), ev.TasksFinished("n1", 1, ((0, 0, 0),))))
        asyncio.run(service.run_cycle())
        assert service.engine.jobs[2].start_time == T0 + 1000
        pad = START_WINDOW.pad_s
        ratio = (900 + pad) / (200 + pad)
        # Job 3 still waits: 900 s already, against a forecast wait of 450 s, a ratio of at least that.
        assert forecasts.calibration.ratios(clock[0]) == [(ratio, True), ((900 + pad) / (450 + pad), False)]
        asyncio.run(forecasts.make(service.engine, clock[0]))
        shift = ratio ** forecasts.calibration.shift_power
        assert forecasts.window == StartWindow(ratio / shift, ratio / shift, pad)
        # Job 3's forecast is shown later than the forward run says, and inside the window calibrated online,
        # not the fixed one.
        unshifted = forecast(capture(service.engine, clock[0]), forecasts.model)[3]
        assert forecasts.starts[3] == pytest.approx(clock[0] + (unshifted - clock[0] + pad) * shift - pad, abs=1e-3)
        assert forecasts.starts[3] > unshifted
        shown = Api(create_app(service, SECRET)).get("/jobs/3").json()
        assert shown["estimated_start"] == pytest.approx(forecasts.starts[3], abs=1e-3)
        calibrated = forecasts.window.bounds(clock[0], forecasts.starts[3])
        assert shown["estimated_start_window"] == pytest.approx(list(calibrated), abs=1e-3)
        assert calibrated != pytest.approx(START_WINDOW.bounds(clock[0], forecasts.starts[3]), abs=1.0)
        # A job cancelled while awaited teaches nothing.
        asyncio.run(service._handle(ev.CancelRequested(3)))
        assert forecasts.calibration.forecasts_of(3) == [] and forecasts.calibration.outcomes == 1
    finally:
        forecasts.close()


def test_the_live_window_counts_the_jobs_still_waiting_as_late_ones():
    """A hand-made history: jobs 1 and 2 were forecast at NOW to start in 1,000 s (waits counted +600 s);
    job 1 started on time (ratio 1), job 2 three times as late (ratio 3), job 3 still waits at NOW + 2,600
    with a forecast wait of 1,000 s (ratio at least 2). From the starts alone the median ratio is 1; with
    job 3 known to come later than 2, Kaplan-Meier says 3, and the forecasts are shifted by it."""
    forecasts = Forecasts()
    forecasts.calibration = OnlineWindow(START_WINDOW, keep=10, min_outcomes=2, covered=0.8, shift_power=1.0)
    forecasts._remember({1: NOW + 1000, 2: NOW + 1000, 3: NOW + 2000}, NOW)
    forecasts._remember({3: NOW + 2000}, NOW + 1000)  # too soon after the last: not kept twice
    assert forecasts.calibration.forecasts_of(3) == [(NOW, NOW + 2000)]
    started_1, started_2 = whole_node_job(1, running=True), whole_node_job(2, running=True)
    started_1.start_time, started_2.start_time = NOW + 1000, NOW + 4200  # (4,200 + 600) / (1,000 + 600) = 3
    forecasts.learn([started_1, whole_node_job(3)])
    at = NOW + 2600  # job 3: (2,600 + 600) / (2,000 + 600) = 1.23 so far
    assert forecasts.calibration.calibrated(at) == (1.0, START_WINDOW)  # one start: too few yet
    forecasts.learn([started_2])
    at = NOW + 4200 + 1  # job 3: at least (4,201 + 600) / 2,600 = 1.85
    observations = forecasts.calibration.ratios(at)
    assert [observed for _, observed in observations] == [True, True, False]
    shift, window = forecasts.calibration.calibrated(at)
    assert shift == pytest.approx(3.0) and window == StartWindow(1 / 3, 1.0, START_WINDOW.pad_s)
    started_only = OnlineWindow(START_WINDOW, keep=10, min_outcomes=2, covered=0.8, shift_power=1.0)
    for job, actual in ((1, NOW + 1000), (2, NOW + 4200)):
        started_only.forecast(job, NOW, NOW + 1000)
        started_only.started(job, actual)
    assert started_only.calibrated(at)[0] == pytest.approx(1.0)  # the bias the censored job corrects


def test_a_slow_forecast_waits_longer_before_the_next():
    forecasts = Forecasts(every_s=30.0)
    assert forecasts.pause_s() == 30.0
    forecasts.took_s = 5.0
    assert forecasts.pause_s() == 30.0
    forecasts.took_s = 100.0
    assert forecasts.pause_s() == 300.0


def test_a_job_that_began_waiting_is_forecast_soon_not_a_whole_pause_later():
    """The core estimates only jobs waiting on resources: one waiting on quota, a dependency or an array's
    task limit has a start only from a forecast, so a new job must not wait a whole pause for one."""
    forecasts = Forecasts(every_s=30.0)
    assert forecasts.due([2, 3], NOW), "the first forecast: at once"
    forecasts.made_at, forecasts.took_s, forecasts.seen = NOW, 0.5, frozenset({2, 3})
    assert not forecasts.due([2, 3], NOW + 10), "the same jobs: the next after the pause"
    assert forecasts.due([2, 3], NOW + 31)
    assert not forecasts.due([2, 3, 4], NOW + NEW_JOBS_AFTER_S - 0.1)
    assert forecasts.due([2, 3, 4], NOW + 0.5 + NEW_JOBS_AFTER_S), "job 4 is new: soon"
    assert forecasts.due([3, 9], NOW + 0.5 + NEW_JOBS_AFTER_S)
    forecasts.took_s = 10.0  # a slow forecast keeps its pause (3x) even for new jobs
    assert not forecasts.due([2, 3, 4], NOW + 35) and forecasts.due([2, 3, 4], NOW + 41)


def forecast_through_the_api(tmp_path, *submissions: dict) -> tuple[ControllerService, dict[int, dict]]:
    """Job 1 holds n1 (a whole node, to T0 + 1,050: its limit, nothing is learnt); `submissions` are posted
    to the API, a cycle runs, a forecast is made; the pending jobs as GET /jobs lists them."""
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    store.save(jobs=[whole_node_job(1, running=True)], nodes=[node("n1")])
    service = ControllerService(restore_engine(CONFIG, LIVE, store, NOW), store, clock=lambda: NOW)
    api = Api(create_app(service, SECRET))
    for fields in submissions:
        reply = api.post("/jobs", json={"user": "alice", "argv": ["true"], "workdir": "/", "gpus": 1,
                                        "time_limit_s": 1000, **fields})
        assert reply.status_code in (200, 201), reply.text
    service.engine.handle(ev.CycleDue(), now=NOW + 1)
    asyncio.run(service.forecasts.make(service.engine, NOW + 1))
    listed = {j["id"]: j for j in api.get("/jobs").json() if j["state"] == "PENDING"}
    for job in listed.values():  # each with its window, the late end past the point forecast
        earliest, latest = job["estimated_start_window"]
        assert job["estimated_start_source"] == "forecast" and earliest <= job["estimated_start"] < latest
    return service, listed


def test_a_job_waiting_on_a_dependency_gets_a_forecast_through_the_api(tmp_path):
    """squeue --start and corral queue showed none for it: the forward run plans it as the engine does."""
    service, listed = forecast_through_the_api(tmp_path, {"dependency": "afterany:1"})
    try:
        job = service.engine.jobs[2]
        assert job.reason == "Dependency" and job.estimated_start is None  # the core estimates none
        assert listed[2]["estimated_start"] == T0 + 1050  # when job 1 ends
    finally:
        service.forecasts.close()


def test_array_tasks_under_the_arrays_task_limit_are_forecast_one_after_another_through_the_api(tmp_path):
    service, listed = forecast_through_the_api(tmp_path, {"array": "0-2%1"})
    try:
        # The first task starts when job 1 ends, the others one after the other (%1), each running its limit.
        assert sorted(job["estimated_start"] for job in listed.values()) == [T0 + 1050, T0 + 2050, T0 + 3050]
        # The core's reservations ignore the limit: every task at T0 + 1,050.
        assert {service.engine.jobs[job_id].estimated_start for job_id in listed} == {T0 + 1050}
    finally:
        service.forecasts.close()


def test_a_job_waiting_on_its_queues_quota_gets_a_forecast_through_the_api(tmp_path):
    """Queue qa's quota is two GPUs: of three one-GPU jobs submitted through the API the third waits on it
    (the core estimates no start for it); the forecast plans it when the first two end (their limit: nothing
    is learnt yet), and the API shows that start with its window."""
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    store.save(jobs=[], nodes=[node("n1")])
    tenancy = TenancySpec(accounts=[{"name": "a"}], users=[{"name": "alice", "accounts": ["a"]}],
                          qos=[{"name": "normal"}], queues=[{"name": "qa", "accounts": ["a"], "nominal": {"gpu": 2}}])
    service = ControllerService(restore_engine(CONFIG, LIVE, store, NOW, file_tenancy=tenancy), store,
                                clock=lambda: NOW)
    api = Api(create_app(service, SECRET))
    try:
        for _ in range(3):
            reply = api.post("/jobs", json={"user": "alice", "argv": ["true"], "workdir": "/", "gpus": 1,
                                            "time_limit_s": 1000, "queue": "qa", "account": "a"})
            assert reply.status_code in (200, 201), reply.text
        later = NOW + 1  # past the start delay after submission
        service.engine.handle(ev.CycleDue(), now=later)
        waiting = [job for job in service.engine.jobs.values() if job.state is JobState.PENDING]
        assert len(waiting) == 1 and waiting[0].reason == "QueueQuota" and waiting[0].estimated_start is None
        running_ends = max(job.start_time or 0.0 for job in service.engine.jobs.values()) + 1000
        asyncio.run(service.forecasts.make(service.engine, later))
        shown = api.get(f"/jobs/{waiting[0].id}").json()
        assert shown["estimated_start_source"] == "forecast"
        assert running_ends <= shown["estimated_start"] <= running_ends + 120  # the next cycles after they end
        earliest, latest = shown["estimated_start_window"]
        assert earliest <= shown["estimated_start"] < latest
    finally:
        service.forecasts.close()
        store.close()


def test_a_forecast_leaves_the_engine_as_it_was(queued, tmp_path):
    service = queued()
    before = {job_id: repr(job) for job_id, job in service.engine.jobs.items()}
    asyncio.run(service.forecasts.make(service.engine, NOW))
    assert {job_id: repr(job) for job_id, job in service.engine.jobs.items()} == before


def test_squeue_start_shows_the_forecast(queued, tmp_path):
    service = queued()
    asyncio.run(service.forecasts.make(service.engine, NOW))
    env = {"CORRAL_SECRET": SECRET, "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "CORRAL_SYSTEM_CLUSTER_FILE": str(tmp_path / "etc" / "cluster.json"), "USER": "alice"}
    with ServerThread(create_app(service, SECRET)) as server:
        out, err, code = squeue(["--start", "-h", "-o", "%i %S"], {**env, "CORRAL_URL": server.url})
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"2 {local(T0 + 300)}", f"3 {local(T0 + 550)}"]


def test_squeue_shows_the_start_window_only_where_a_format_names_corrals_own_fields(queued, tmp_path):
    service = queued()
    asyncio.run(service.forecasts.make(service.engine, NOW))
    env = {"CORRAL_SECRET": SECRET, "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "CORRAL_SYSTEM_CLUSTER_FILE": str(tmp_path / "etc" / "cluster.json"), "USER": "alice"}
    with ServerThread(create_app(service, SECRET)) as server:
        env["CORRAL_URL"] = server.url
        out, err, code = squeue(["--start", "-O", "jobid:6,starttime:20,startearliest:20,startlatest:20"], env)
        plain, _, _ = squeue(["--start"], env)
    assert (code, err) == (0, "")
    earliest, latest = service.forecasts.window.bounds(NOW, T0 + 300)
    lines = out.splitlines()
    assert lines[0].split() == ["JOBID", "START_TIME", "EARLIEST_START", "LATEST_START"]
    assert lines[1].split() == ["2", local(T0 + 300), local(earliest), local(latest)]
    assert "EARLIEST" not in plain and "LATEST" not in plain  # Slurm's default --start columns are unchanged


def local(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def test_forecasts_run_in_a_child_process_that_is_started_again_if_it_dies(queued):
    service = queued()
    forecasts = service.forecasts
    asyncio.run(forecasts.make(service.engine, NOW))
    first = forecasts.process.pid
    assert first is not None and first != os.getpid()
    assert psutil.Process(first).ppid() == os.getpid()
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while psutil.Process(first).status() != psutil.STATUS_ZOMBIE:  # dead; ours to reap
        assert time.monotonic() < deadline
        time.sleep(0.02)
    forecasts.starts = {}
    asyncio.run(forecasts.make(service.engine, NOW))  # a new child
    assert forecasts.starts == {2: T0 + 300, 3: T0 + 550}
    assert forecasts.process.pid not in (None, first)


class Stalling(RuntimeModel):
    """A model whose first prediction says so in a file, then takes a minute (in the forecast process)."""

    def __init__(self, marker: Path) -> None:
        super().__init__()
        self.marker = marker

    def runtime(self, job: Job) -> float:
        self.marker.write_text("predicting")
        time.sleep(60)
        return 1.0


def test_a_child_killed_during_a_forecast_fails_that_forecast_with_its_exit_status(queued, tmp_path):
    service = queued()
    process = service.forecasts.process
    marker = tmp_path / "predicting"

    async def killed_midway() -> None:
        asking = asyncio.create_task(process.forecast(capture(service.engine, NOW), Stalling(marker), 3600.0))
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline, "the forecast never started"
            await asyncio.sleep(0.02)
        os.kill(process.pid, signal.SIGKILL)
        await asking

    with pytest.raises(ForecastFailed, match=r"exit status -9"):
        asyncio.run(killed_midway())
    assert process.pid is None


def test_the_child_ends_when_the_controller_closes_the_pipe_or_dies(tmp_path):
    """A controller killed outright leaves no forecast process behind: the child reads end of file."""
    script = tmp_path / "controller.py"
    script.write_text(
        "import asyncio, os, sys\n"
        "from corral.controller.forecasts import ForecastProcess\n"
        "from corral.sim.forecast import RuntimeModel\n"
        "if __name__ == '__main__':\n"
        "    process = ForecastProcess()\n"
        "    try:\n"
        "        asyncio.run(process.forecast(None, RuntimeModel(), 1.0))\n"
        "    except Exception as exc:\n"
        "        print(type(exc).__name__, exc, file=sys.stderr)\n"
        "    print(process.pid, flush=True)\n"
        "    os.kill(os.getpid(), 9)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL
    # The forward run of nothing fails in the child, and says why; the child lives on until its parent dies.
    assert "ForecastFailed AttributeError" in done.stderr
    child = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the forecast process outlived its controller"
        time.sleep(0.05)
