import pytest

from corral.sim.traces import TraceFormatError
from corral.sim.traces.sacct import mem_mib, parse_time_limit_s, read_sacct

from .builders import FIXTURES

RECORDED = FIXTURES / "sacct_slurm2205.txt"  # real Slurm 22.05 output; commands in sacct_slurm2205.cmd


def test_real_sacct_output():
    w = read_sacct(RECORDED)
    by_id = {j.id: j for j in w.jobs}
    # 1015 never started (CANCELLED while held), 1018 was still running; steps are ignored.
    assert sorted(by_id) == [1011, 1012, 1013, 1014, 1016, 1017, 1019]
    assert w.notes == ("7 finished job(s) of 9 in sacct output; 8 step row(s) ignored",
                       "1 job(s) skipped: never started", "1 job(s) skipped: still running")
    two = by_id[1012]
    assert (two.num_nodes, two.gpus_per_node, two.cpus_per_node, two.time_limit_s) == (2, 4, 1, 3600)
    assert two.mem_per_node_mib == 64_000  # ReqTRES mem=125G over 2 nodes (AllocTRES has no mem)
    mem = by_id[1013]
    assert (mem.gpus_per_node, mem.cpus_per_node, mem.mem_per_node_mib, mem.time_limit_s) == (2, 4, 2048, 172_800)
    timeout = by_id[1017]
    assert (timeout.duration_s, timeout.time_limit_s) == (70.0, 60)  # killed 10 s after its limit
    assert by_id[1019].name == "arr"  # array task 1016_0 keeps its raw id
    assert (by_id[1011].user, by_id[1011].account, by_id[1011].queue) == ("root", "root", "gpu")
    assert w.origin_epoch_s is not None and min(j.submit_s for j in w.jobs) == 0.0


@pytest.mark.parametrize("text, seconds", [
    ("00:05:00", 300), ("2-00:00:00", 172_800), ("5", 300), ("5:30", 330), ("1-2", 93_600), ("1-2:3", 93_780),
    ("1-02:03:04", 93_784), ("UNLIMITED", None), ("Partition_Limit", None), ("", None),
])
def test_time_limits(text, seconds):
    assert parse_time_limit_s(text) == seconds


def test_bad_time_limit():
    with pytest.raises(ValueError, match="not a Slurm time limit"):
        parse_time_limit_s("1:2:3:4")


@pytest.mark.parametrize("text, mib", [("62.50G", 64_000), ("2G", 2048), ("100", 100), ("512K", 0.5), ("1T", 1 << 20)])
def test_memory_sizes(text, mib):
    assert mem_mib(text) == mib


HEADER = "JobID|JobIDRaw|User|Account|Partition|State|Submit|Start|End|Timelimit|AllocNodes|AllocTRES|ReqTRES"


def _write(tmp_path, *rows, header=HEADER):
    path = tmp_path / "sacct.txt"
    path.write_text("\n".join((header, *rows)) + "\n")
    return path


def test_parsable_with_trailing_delimiter_and_epoch_times(tmp_path):
    path = _write(tmp_path, "9|9|u|a|p|COMPLETED|100|110|170|10|1|cpu=2,gres/gpu:a100=2,node=1||",
                  header=HEADER + "|")
    (only,) = read_sacct(path).jobs
    assert (only.id, only.submit_s, only.duration_s, only.gpus_per_node, only.gpu_model) == (9, 0, 60, 2, "a100")


def test_missing_columns(tmp_path):
    path = _write(tmp_path, header="JobID|Submit|Start|End|User")
    with pytest.raises(TraceFormatError, match=r"sacct\.txt:1: header lacks Timelimit, Account, Partition, State, "
                                               r"AllocTRES \(or AllocNodes and ReqTRES\)"):
        read_sacct(path)


def test_not_parsable_output(tmp_path):
    path = _write(tmp_path, header="JobID      Submit    ")
    with pytest.raises(TraceFormatError, match=r"is this `sacct -P` output"):
        read_sacct(path)


@pytest.mark.parametrize("row, message", [
    ("9|9|u|a|p|COMPLETED|yesterday|110|170|10|1|node=1|", r":2: column 'Submit': 'yesterday' is not a Slurm time"),
    ("9|9|u|a|p|COMPLETED|100|110|170|10|1", r":2: 11 fields, header has 13"),
    ("9|9|u|a|p|COMPLETED|100|170|110|10|1|node=1|", r":2: times out of order"),
    ("9|9|u|a|p|COMPLETED|100|110|170|forever|1|node=1|", r":2: 'forever' is not a Slurm time limit"),
])
def test_malformed_rows(tmp_path, row, message):
    with pytest.raises(TraceFormatError, match=message):
        read_sacct(_write(tmp_path, row))
