"""Jobs with a container (issue 25, decision 0020), without running one: pyxis's options through sbatch's
table (command line and #SBATCH), srun and `corral submit` into JobSubmit and the spec; a step's options over
its job's; placement only on nodes with the runtime (the feature `runc`), refused at submit when too few."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from corral.api.schemas import JobSubmit
from corral.api.services import ServiceSpec
from corral.api.steps import StepSubmit
from corral.controller.step_views import step_container
from corral.core.model import Gpu
from corral.engine import events as ev
from corral.engine.admission import AdmissionError, admit
from corral.engine.build import build_engine
from corral.engine.config import LIVE, EngineConfig
from corral.engine.membership import Inventory
from corral.engine.records import JobState, Node
from corral.jobscript.submission import build_submission
from corral.protocol import ContainerLaunch
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sbatch.opts import apply_script, parse_sbatch
from corral.slurm.srun.opts import parse_srun
from tests.engine.harness import Harness
from tests.engine.test_node_choice import CONFIG, T0, placed

IMAGE = "/images/pytorch.tar"
RUNC = [Node(f"n{i}", tuple(Gpu(g, "NVIDIA H100 80GB HBM3") for g in range(4)), 16, 64_000,
             partitions=frozenset({"gpu"}), features=frozenset({"ib", "runc"} if i < 3 else {"ib"}))
        for i in (1, 2, 3)]
SCRIPT = f"""#!/bin/sh
#SBATCH --container-image={IMAGE}
#SBATCH --container-mounts=/data:/data:ro,/scratch
#SBATCH --container-workdir=/work --container-name=env1
#SBATCH --container-env=NCCL_DEBUG,HF_HOME
#SBATCH --no-container-mount-home --container-remap-root
srun python train.py
"""
FIELDS = {"container_image": IMAGE, "container_mounts": "/data:/data:ro,/scratch", "container_workdir": "/work",
          "container_name": "env1", "container_env": "NCCL_DEBUG,HF_HOME", "container_mount_home": False,
          "container_remap_root": True}


def engine_with(runc_on: tuple[str, ...] = ()) -> Harness:
    """Three nodes of 4 GPUs; those in `runc_on` report the runtime, as an agent with runc installed does."""
    engine = Harness(build_engine(EngineConfig(start_delay_s=0.0), LIVE))
    for name in ("node1", "node2", "node3"):
        inventory = Inventory(tuple(Gpu(i, "NVIDIA H100 80GB HBM3") for i in range(4)), 16, 64_000, "127.0.0.1",
                              features=frozenset({"runc"} if name in runc_on else set()))
        engine.register_node(name, inventory, set(), set(), T0)
    return engine


def test_sbatch_directives_and_the_command_line_set_the_container_fields() -> None:
    options, _ = parse_sbatch([], {})
    from_script = apply_script(options, SCRIPT).submit
    assert {k: v for k, v in from_script.items() if k.startswith("container_")} == FIELDS
    options, _ = parse_sbatch(["--container-image=/other.tar", "--container-mount-home"], {})
    merged = apply_script(options, SCRIPT).submit
    assert (merged["container_image"], merged["container_mount_home"]) == ("/other.tar", True)  # the line wins
    spec = admit(JobSubmit(**{"script": SCRIPT, "workdir": "/tmp", "user": "alice", **from_script}), CONFIG, RUNC)
    assert {k: getattr(spec, k) for k in FIELDS} == FIELDS


@pytest.mark.parametrize("args, message", [
    (["--container-mounts=data:/data"], "--container-mounts: 'data:/data': both paths must be absolute"),
    (["--container-mounts=/d:/d:rx"], "--container-mounts: '/d:/d:rx': the flag must be ro or rw, not 'rx'"),
    (["--container-name=a b"], "--container-name 'a b': use 1 to 64 letters, digits, - and _"),
    (["--container-env=1X"], "--container-env: '1X' is not a variable name"),
    (["--container-workdir=work"], "--container-workdir 'work': give an absolute path inside the container"),
])
def test_sbatch_refuses_a_bad_container_option_with_what_is_wrong(args, message) -> None:
    with pytest.raises(SlurmCommandError) as refused:
        parse_sbatch(args, {})
    assert refused.value.stderr == f"sbatch: error: {message}\n" and refused.value.exit_code == 1


def test_corral_submit_reads_the_same_options() -> None:
    fields = build_submission(["--container-image", IMAGE, "--no-container-mount-home"],
                              ["--container-name=env2", "--container-remap-root"])
    assert fields == {"container_image": IMAGE, "container_mount_home": False, "container_name": "env2",
                      "container_remap_root": True}


def test_srun_gives_a_step_its_own_options_and_a_new_allocation_its_container() -> None:
    options = parse_srun(["--container-name=env1", "--no-container-mount-home", "python", "x.py"],
                         {"SLURM_JOB_ID": "7"})
    assert options.container == {"container_name": "env1", "container_mount_home": False}
    assert options.command == ("python", "x.py")


def test_the_api_refuses_options_without_an_image_for_a_job_but_a_name_alone_for_a_step() -> None:
    with pytest.raises(ValidationError, match="--container-name without --container-image"):
        JobSubmit(argv=["x"], workdir="/", user="u", container_name="env1")
    with pytest.raises(ValidationError, match="both paths must be absolute"):
        JobSubmit(argv=["x"], workdir="/", user="u", container_image=IMAGE, container_mounts="rel")
    assert StepSubmit(argv=["x"], workdir="/", container_name="env1").container_name == "env1"


def test_a_steps_options_replace_its_jobs_one_by_one() -> None:
    engine = engine_with(runc_on=("node1",))
    submit = JobSubmit(argv=["x"], workdir="/", user="u", **{**FIELDS, "container_name": ""})
    job_id, _ = engine.handle(ev.SubmissionRequested(submit), now=T0).reply
    job = engine.jobs[job_id]
    launch = step_container(job, {"container_name": "env9", "container_remap_root": False})
    assert launch == ContainerLaunch(image=IMAGE, mounts="/data:/data:ro,/scratch", workdir="/work", name="env9",
                                     env="NCCL_DEBUG,HF_HOME", mount_home=False, remap_root=False)
    assert step_container(job, {}) == ContainerLaunch.of(job.spec)


def test_a_job_with_an_image_is_refused_when_too_few_nodes_have_the_runtime() -> None:
    submit = dict(argv=["x"], workdir="/", user="u", container_image=IMAGE)
    assert admit(JobSubmit(**submit, nodes=2), CONFIG, RUNC).container_image == IMAGE
    with pytest.raises(AdmissionError, match="--container-image needs nodes that can run containers .feature "
                                             "runc.*2 of the partition's 3 node.s. can, the job needs 3"):
        admit(JobSubmit(**submit, nodes=3), CONFIG, RUNC)
    with pytest.raises(AdmissionError, match="0 of the partition's"):
        admit(JobSubmit(**submit), CONFIG, [Node("n1", (), 8, 8_000, partitions=frozenset({"gpu"}))])
    assert ServiceSpec(name="web", command=["serve"], workdir="/", image=IMAGE).image == IMAGE


def test_a_job_with_an_image_waits_for_a_node_with_the_runtime_while_one_without_is_idle() -> None:
    engine = engine_with(runc_on=("node1",))
    assert placed(engine, container_image=IMAGE, gpus_per_node=4) == ("node1",)
    assert placed(engine, container_image=IMAGE, gpus_per_node=1) == ()  # node1 full; node2, node3 idle
    waiting = next(j for j in engine.jobs.values() if j.state is JobState.PENDING)
    assert waiting.spec.container_image == IMAGE
    assert placed(engine, gpus_per_node=1) != ()  # a job without an image takes an idle node meanwhile


def test_a_local_image_named_relative_to_the_submitter_is_sent_absolute(tmp_path, monkeypatch) -> None:
    """The node's agent reads the file from its own working directory: a relative name must not reach it."""
    (tmp_path / "img.sif").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    for given, sent in (("./img.sif", str(tmp_path / "img.sif")), ("img.sif", str(tmp_path / "img.sif")),
                        ("../x/y.tar", str(tmp_path.parent / "x/y.tar")),
                        ("nvcr.io#nvidia/pytorch:24.05-py3", "nvcr.io#nvidia/pytorch:24.05-py3"),
                        ("busybox:1", "busybox:1")):
        options, _ = parse_sbatch([f"--container-image={given}"], {})
        assert apply_script(options, "#!/bin/sh\ntrue\n").submit["container_image"] == sent


def test_a_jobs_end_reaches_the_nodes_where_only_its_steps_ran() -> None:
    """A batch job's script runs on its first node; its steps ran on both. Its end used to reach only the first
    node's agent (the runner ending there): the second never learned it, and kept the named containers its steps
    made there. Now the end sends that node a Kill of everything (no grace, no closing line), and nothing to a
    node where no step ran."""
    import dataclasses

    from corral.engine.commands import Kill
    from tests.engine.builders import engine_with_nodes, spec
    from tests.engine.test_steps import batch_job, request

    engine = engine_with_nodes(count=3)
    job = batch_job(engine, nodes=3)
    first, second, third = job.node_names
    engine.start_step(job.id, request(nodelist=(first, second)), T0 + 1)
    engine.step_finished(first, job.id, 0, [(0, 0, 0)], None, T0 + 2)
    engine.step_finished(second, job.id, 0, [(1, 0, 0)], None, T0 + 3)
    commands = engine.node_finished(first, job.id, [(0, 0, 0)], None, T0 + 4)
    assert job.state is JobState.COMPLETED
    assert commands == [Kill(job.id, second, 9, 0.0)], "to the step-only node, not the first nor the stepless"
    assert third not in {c.node for c in commands}

    allocation = engine.submit(dataclasses.replace(spec(nodes=2, gpus=1), argv=(), allocation=True), T0 + 5)
    engine.schedule(T0 + 5)
    engine.start_step(allocation.id, request(), T0 + 6)
    for rank, node in enumerate(allocation.node_names):
        engine.step_finished(node, allocation.id, 0, [(rank, 0, 0)], None, T0 + 7)
    ended = engine.complete(allocation.id, 0, 0, T0 + 8)
    assert sorted(c.node for c in ended if isinstance(c, Kill) and c.grace_s == 0.0) == \
        sorted(allocation.node_names), "an allocation runs nothing of its own: every step node hears its end"
