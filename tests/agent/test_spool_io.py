"""The spool's and the leaders' bookkeeping as cheap as it can be without changing what it records
(issue 24): a process's start and state from one read of its /proc stat, the records written whole with
their directory made only when missing, the spec's fields encoded in one go, and no failed import of
sniffio per HTTP request."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import psutil
import pytest

from corral.agent.leaders import encode_spec, same_process
from corral.agent.task_spool import TaskRecord, TaskSpool, process_state, since_boot


def test_process_state_gives_psutils_start_and_sees_a_zombie(tmp_path):
    child = subprocess.Popen(["sleep", "30"])
    try:
        started, state = process_state(child.pid)
        assert started == pytest.approx(since_boot(psutil.Process(child.pid)), abs=0.001)
        assert state in ("S", "R")
        assert same_process(child.pid, started)
        assert not same_process(child.pid, started - 1.0), "another start time: a reused pid"
        child.kill()
        deadline = time.monotonic() + 5
        while process_state(child.pid)[1] != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)  # not reaped yet: a zombie
        assert process_state(child.pid)[1] == "Z"
        assert not same_process(child.pid, started), "a zombie has ended"
    finally:
        child.kill()
        child.wait()
    assert process_state(child.pid) is None or process_state(child.pid)[0] != started


def test_the_spool_records_a_task_with_the_start_the_factory_read(tmp_path):
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        spool = TaskSpool(tmp_path / "spool")
        record = spool.add(child.pid, 9, None, [2, 3], rank=1, leader_pid=os.getpid(), leader_started=123.5)
        assert record is not None and record.leader_started == 123.5
        assert record.started == pytest.approx(since_boot(psutil.Process(child.pid)), abs=0.001)
        assert spool.records() == [record]
        fields = json.loads((spool.directory / f"{child.pid}.json").read_text())
        assert set(fields) == {"pgid", "started", "boot_id", "job_id", "step_id", "gpus", "rank", "leader",
                               "leader_started"}
        # Without the factory's reading, the leader's own start is read.
        again = spool.add(child.pid, 9, None, [2, 3], rank=1, leader_pid=os.getpid())
        assert again is not None
        assert again.leader_started == pytest.approx(since_boot(psutil.Process(os.getpid())), abs=0.001)
    finally:
        child.kill()
        child.wait()
    assert spool.add(child.pid, 9, None, [2]) is None, "a task already reaped is not recorded"


def test_records_and_launches_are_written_whole_into_a_directory_made_when_missing(tmp_path):
    spool = TaskSpool(tmp_path / "spool")
    record = TaskRecord(41, 1.0, "boot", 5, None, (0,), 0, 40, 0.5)
    spool.write(record)
    spool.save_launch(5, None, '{"job_id": 5}')
    for directory in (spool.directory, spool.launches):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    # Removed under a running agent: made again at the next write, not lost.
    for path in [*spool.directory.iterdir(), *spool.launches.iterdir()]:
        path.unlink()
    spool.directory.rmdir()
    spool.launches.rmdir()
    spool.write(record)
    spool.save_launch(5, 0, '{"step": 0}')
    assert spool.records() == [record]
    assert spool.saved_launches() == {(5, 0): '{"step": 0}'}
    assert not [p for p in (*spool.directory.iterdir(), *spool.launches.iterdir()) if p.name.endswith(".tmp")]


def test_the_spec_is_encoded_as_os_fsencode_encodes_each_field():
    argv = ["prog", "caf\u00e9", "raw-\udcff-byte"]  # a byte that is not UTF-8, as os.fsdecode gives it
    env = {"A": "1", "LANG": "C.UTF-8", "WEIRD": "x\udcfey"}
    fields = encode_spec(argv, cwd="/tmp", env=env, user=(1000, 1000, [1000, 27]), contact_file=None,
                         cgroup_leaf=None, controlling_terminal=False)
    expected = [os.fsencode(f) for f in ["3", *argv, "3", "A=1", "LANG=C.UTF-8", "WEIRD=x\udcfey", "/tmp",
                                          "1000 1000 1000 27"]]
    assert fields == [*expected, b"", b"", b"0"]
    with pytest.raises(ValueError, match="embedded null byte"):
        encode_spec(["prog", "a\0b"], cwd="/tmp", env={}, user=None, contact_file=None, cgroup_leaf=None,
                    controlling_terminal=False)


def test_the_agent_stops_httpcore_searching_for_sniffio_on_every_request():
    code = """
import asyncio, importlib.util, sys
installed = importlib.util.find_spec("sniffio") is not None
import corral.agent.agent
from httpcore._synchronization import current_async_library
searches = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "sniffio":
            searches.append(name)
        return None
sys.meta_path.insert(0, Watch())
async def main():
    return [current_async_library() for _ in range(50)]
assert set(asyncio.run(main())) == {"asyncio"}
print(installed, len(searches))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    if out[0] == "True":
        pytest.skip("sniffio is installed here: httpcore imports it once")
    assert out[1] == "0", f"{out[1]} searches of sys.path for sniffio in 50 calls"
