"""The MPS control daemon, with a stand-in `nvidia-cuda-mps-control` that records each call: started once
for the first share job, stopped after the last one; an adopted job keeps it without a second start; a
daemon that will not start is an error naming the program and what it said; no program, nothing run."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from corral.agent.mps import MpsDaemon, MpsError


def stand_in(tmp_path: Path, fail: bool = False) -> tuple[Path, Path]:
    record = tmp_path / "calls"
    program = tmp_path / "nvidia-cuda-mps-control"
    program.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-d" ]; then {"echo cannot open the device >&2; exit 3" if fail else f"echo start >> {record}"}; '
        f"else read command; echo \"$command\" >> {record}; fi\n")
    program.chmod(0o755)
    return program, record


def test_started_for_the_first_share_job_and_stopped_after_the_last(tmp_path):
    program, record = stand_in(tmp_path)
    daemon = MpsDaemon(str(program))

    async def scenario() -> list[list[str]]:
        seen = []
        await daemon.acquire(1)
        await daemon.acquire(2)
        seen.append(record.read_text().split())
        await daemon.release(1)
        seen.append(record.read_text().split())
        await daemon.release(2)
        await daemon.release(2)  # a second end of the same job stops nothing more
        seen.append(record.read_text().split())
        await daemon.acquire(3)
        seen.append(record.read_text().split())
        return seen

    assert asyncio.run(scenario()) == [["start"], ["start"], ["start", "quit"], ["start", "quit", "start"]]


def test_an_adopted_job_holds_the_running_daemon_without_starting_another(tmp_path):
    program, record = stand_in(tmp_path)
    daemon = MpsDaemon(str(program))
    daemon.adopt(7)
    asyncio.run(daemon.acquire(8))
    asyncio.run(daemon.release(7))
    assert not record.exists(), "the daemon the adopted job runs under was neither started again nor stopped"
    asyncio.run(daemon.release(8))
    assert record.read_text().split() == ["quit"]


def test_a_daemon_that_will_not_start_is_an_error_saying_why(tmp_path):
    program, _ = stand_in(tmp_path, fail=True)
    with pytest.raises(MpsError, match=r"could not start the MPS control daemon \(.*\): exit 3: cannot open"):
        asyncio.run(MpsDaemon(str(program)).acquire(1))


def test_a_node_without_mps_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    daemon = MpsDaemon()
    assert daemon.control is None
    asyncio.run(daemon.acquire(1))
    asyncio.run(daemon.release(1))
