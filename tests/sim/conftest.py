"""Real traces, read once per session (tests skip where the files are not present)."""
from __future__ import annotations

import pytest

from .builders import needs


@pytest.fixture(scope="session")
def philly_workload():
    from corral.sim.traces import philly

    needs(philly.JOBS_PATH)
    needs(philly.VC_PATH)
    return philly.read_philly()


@pytest.fixture(scope="session")
def openb_pods():
    from corral.sim.traces import openb

    return openb.read_pods(needs(openb.pod_list_path("default")))


@pytest.fixture(scope="session")
def openb_nodes():
    from corral.sim.traces import openb

    return openb.read_nodes(needs(openb.GPU_NODES_PATH))


@pytest.fixture(scope="session")
def golden_rows():
    from corral.sim.traces import fgd, fgd_curves

    return fgd_curves.read_golden_run(needs(fgd.GOLDEN_PATH))
