"""corral up hands its --pids-max to every agent it starts (issue 21, item 7)."""
from __future__ import annotations

from corral.cli.hostinfo import HostFacts
from corral.cli.up_plan import UpOptions, plan_up


def test_corral_up_gives_every_agent_its_process_limit(tmp_path) -> None:
    from corral.agent.__main__ import build_parser

    facts = HostFacts(cpus=8, mem_mib=64000, nvml_gpus=None)
    plan = plan_up(UpOptions(state_dir=tmp_path, nodes=2, gpus_per_node=1, pids_max=512), facts, python="py")
    for argv in plan.agent_argvs:
        assert build_parser().parse_args(list(argv[3:])).pids_max == 512  # past "py -m corral.agent"
    default = plan_up(UpOptions(state_dir=tmp_path, gpus_per_node=1), facts, python="py")
    assert not any("--pids-max" in argv for argv in default.agent_argvs)
