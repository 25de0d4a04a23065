"""srun's closing lines for a node whose agent never reached srun's listener: the agent's reason (the
address it tried) and what must be reachable, not only `Exited with exit code 1` (issue 21, item 7)."""
from __future__ import annotations

import io

from corral.slurm.srun.opts import StepOptions
from corral.slurm.srun.step_client import _report
from corral.slurm.srun.step_streams import StepStreams

STEP = {"job_id": 7, "step_id": 0, "nodes": ["gpu1", "gpu2"], "tasks_per_node": [1, 1]}


def test_a_node_that_never_connected_shows_its_agents_reason_and_the_address_to_reach(capsys) -> None:
    streams = StepStreams(host="127.0.0.1", advertise_host="127.0.0.1", stdout=io.BytesIO(),
                          stderr=io.BytesIO()).start()
    try:
        streams.expect({"gpu1": [0], "gpu2": [1]})
        error = f"cannot connect to srun at 127.0.0.1:{streams.port}: ConnectionRefusedError: [Errno 111] refused"
        record = {"state": "FAILED", "exit_code": 1, "exit_signal": 0, "error": error}
        code = _report(streams, STEP, record, StepOptions())
    finally:
        streams.close()
    assert code == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[:2] == [f"srun: error: gpu1: task 0: {error}", f"srun: error: gpu2: task 1: {error}"]
    assert lines[2].startswith(f"srun: error: the nodes' agents must reach this host at 127.0.0.1:{streams.port}")
    assert "docs/adding-a-machine.md" in lines[2]


def test_without_a_reported_error_the_exit_code_is_reported_as_slurm_does(capsys) -> None:
    streams = StepStreams(host="127.0.0.1", stdout=io.BytesIO(), stderr=io.BytesIO()).start()
    try:
        streams.expect({"gpu1": [0], "gpu2": [1]})
        code = _report(streams, STEP, {"exit_code": 3, "exit_signal": 0, "error": ""}, StepOptions())
    finally:
        streams.close()
    assert code == 3
    assert capsys.readouterr().err == ("srun: error: gpu1: task 0: Exited with exit code 3\n"
                                       "srun: error: gpu2: task 1: Exited with exit code 3\n")
