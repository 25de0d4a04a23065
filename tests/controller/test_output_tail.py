"""The end of a job's output file as the dashboard shows it (controller/output_tail.py), with real files:
only a regular file of the job's user (or, on a node in development mode, of its agent's user) is read."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.controller.output_tail import OutputUnavailable, output_path, read_tail
from corral.core.model import Gpu, NodeSlice, Request
from corral.engine.records import Job, JobSpec, JobState, Node

ALICE_UID = 4242


def job(workdir: Path, *, started: bool = True, output: str = "slurm-%j.out", uid: int = ALICE_UID) -> Job:
    spec = JobSpec(name="train", user="alice", uid=uid, request=Request(gpus_per_node=1), argv=("true",),
                   workdir=str(workdir), output=output)
    record = Job(id=12, spec=spec, submit_time=1.0, state=JobState.RUNNING if started else JobState.PENDING)
    if started:
        record.slices = (NodeSlice("n1", (0,), 1, 0),)
    return record


def node(run_as_user: bool = True, agent_user: str = "") -> Node:
    return Node("n1", (Gpu(0, "sim"),), 8, 1000, up=True, run_as_user=run_as_user, agent_user=agent_user)


def write(path: Path, data: bytes, uid: int) -> None:
    path.write_bytes(data)
    os.chown(path, uid, -1)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="gives files to other users (chown): needs root")


@needs_root
def test_the_tail_of_the_job_users_file(tmp_path: Path) -> None:
    write(tmp_path / "out-12-n1.txt", b"line 1\n" + b"x" * 100 + b"\nlast \xff line\n", ALICE_UID)
    tail = read_tail(job(tmp_path, output="out-%j-%N.txt"), node(), 16)
    assert (tail.path, tail.node, tail.size) == (str(tmp_path / "out-12-n1.txt"), "n1", 120)
    assert tail.text == "xxx\nlast \ufffd line\n" and tail.truncated
    whole = read_tail(job(tmp_path, output="out-%j-%N.txt"), node(), 1000)
    assert whole.text.startswith("line 1\n") and not whole.truncated


@needs_root
def test_a_file_of_another_user_or_a_link_to_one_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    write(secret, b"root's secret\n", 0)
    (tmp_path / "slurm-12.out").symlink_to(secret)
    with pytest.raises(OutputUnavailable, match="not owned by alice") as refused:
        read_tail(job(tmp_path), node(), 1000)
    assert refused.value.status == 403
    with pytest.raises(OutputUnavailable, match="not owned by alice"):
        read_tail(job(tmp_path, output=str(secret)), node(), 1000)


@needs_root
def test_on_a_node_in_development_mode_its_agent_users_files_are_read(tmp_path: Path) -> None:
    write(tmp_path / "slurm-12.out", b"hello\n", 0)  # the agent ran the task as root
    assert read_tail(job(tmp_path), node(run_as_user=False, agent_user="root"), 1000).text == "hello\n"
    with pytest.raises(OutputUnavailable, match="not owned by alice"):
        read_tail(job(tmp_path), node(run_as_user=True, agent_user="root"), 1000)


def test_no_output_before_the_start_nor_where_the_file_is_not_here(tmp_path: Path) -> None:
    with pytest.raises(OutputUnavailable, match="has not started") as pending:
        read_tail(job(tmp_path, started=False), node(), 1000)
    assert pending.value.status == 409
    with pytest.raises(OutputUnavailable, match="written on n1; the dashboard reads it from a filesystem") as missing:
        read_tail(job(tmp_path), node(), 1000)
    assert missing.value.status == 404
    os.mkfifo(tmp_path / "slurm-12.out")  # opened without blocking, and refused: not a regular file
    with pytest.raises(OutputUnavailable, match="not a regular file"):
        read_tail(job(tmp_path), node(), 1000)


def test_the_path_is_the_first_tasks_on_the_first_node(tmp_path: Path) -> None:
    assert output_path(job(tmp_path, output="%x-%u-%j-%N-%t.log")) == str(tmp_path / "train-alice-12-n1-0.log")
    assert output_path(job(tmp_path, output="/abs/%j.out")) == "/abs/12.out"


@needs_root
def test_a_follower_gets_only_what_is_new_and_never_half_a_character(tmp_path: Path) -> None:
    """The dashboard's job page follows a running job's output: each read starts at the last one's `end`."""
    path, record = tmp_path / "slurm-12.out", job(tmp_path)
    write(path, b"epoch 1\n", ALICE_UID)
    first = read_tail(record, node(), 1000)
    assert (first.text, first.start, first.end) == ("epoch 1\n", 0, 8)
    assert read_tail(record, node(), 1000, from_byte=first.end).text == ""  # nothing new
    with path.open("ab") as stream:
        stream.write("epoch 2 \N{GREEK SMALL LETTER ALPHA}".encode()[:-1])  # the last character cut in two
    cut = read_tail(record, node(), 1000, from_byte=first.end)
    assert (cut.text, cut.start, cut.end) == ("epoch 2 ", 8, 16)  # its first byte is kept for the next read
    with path.open("ab") as stream:
        stream.write("\N{GREEK SMALL LETTER ALPHA}".encode()[-1:] + b"\n" + b"y" * 50)
    rest = read_tail(record, node(), 1000, from_byte=cut.end)
    assert (rest.text, rest.start) == ("\N{GREEK SMALL LETTER ALPHA}\n" + "y" * 50, 16)
    # More came than one read holds: the newest `tail_bytes` of it, and `start` says what was skipped.
    skipped = read_tail(record, node(), 10, from_byte=first.end)
    assert (skipped.text, skipped.start, skipped.end) == ("y" * 10, rest.end - 10, rest.end)
    # The file was rewritten, shorter than what the follower saw: its tail again, from where it is.
    write(path, b"new run\n", ALICE_UID)
    again = read_tail(record, node(), 1000, from_byte=rest.end)
    assert (again.text, again.start, again.end) == ("new run\n", 0, 8)
