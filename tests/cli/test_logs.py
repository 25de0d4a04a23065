"""`corral logs JOB [-f]`: the job's output file, read from the filesystem shared with the nodes."""
from __future__ import annotations

import threading
import time

from .standin import make_job


def finished(tmp_path, **fields) -> dict:
    return make_job(7, name="train", state="COMPLETED", reason="None", start_time=1.0, end_time=2.0,
                    nodelist="node1", workdir=str(tmp_path), output="out-%j.txt",
                    slices=[{"node": "node1", "gpus": [], "cpus": 1, "mem_mib": 0, "gpu_milli": 1000}], **fields)


def test_logs_prints_the_output_file_and_error_the_error_file(standin, cli, tmp_path):
    standin.state.jobs[7] = finished(tmp_path, error="err-%x.txt")
    (tmp_path / "out-7.txt").write_bytes(b"epoch 1\nepoch 2\n")
    (tmp_path / "err-train.txt").write_bytes(b"warning\n")
    result = cli("logs", "7")
    assert (result.exit_code, result.stdout) == (0, "epoch 1\nepoch 2\n")
    assert cli("logs", "7", "--error").stdout == "warning\n"


def test_a_file_not_on_this_host_names_its_node(standin, cli, tmp_path):
    standin.state.jobs[7] = finished(tmp_path)
    result = cli("logs", "7")
    assert result.exit_code == 1
    assert f"{tmp_path}/out-7.txt does not exist here: job 7's output is written on node1" in result.stderr


def test_follow_prints_what_a_running_job_writes_until_it_ends(standin, cli, tmp_path):
    standin.state.jobs[7] = finished(tmp_path)
    standin.state.jobs[7]["state"] = "RUNNING"
    path = tmp_path / "out-7.txt"
    path.write_bytes(b"first\n")

    def write_then_end() -> None:
        time.sleep(1.0)
        with open(path, "ab") as out:
            out.write(b"second\n")
        time.sleep(0.5)
        standin.state.jobs[7]["state"] = "COMPLETED"
        with open(path, "ab") as out:
            out.write(b"last words\n")

    writer = threading.Thread(target=write_then_end)
    writer.start()
    result = cli("logs", "7", "-f")
    writer.join()
    assert (result.exit_code, result.stdout) == (0, "first\nsecond\nlast words\n")
