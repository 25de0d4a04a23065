import pytest

from corral.sim.traces import TraceFormatError, helios

from .builders import needs


def test_venus_and_earth_shapes():
    needs(helios.HELIOS_DIR)
    venus = helios.helios_cluster("Venus")
    assert venus.total_gpus == 1_080  # the last day, 2020-09-28
    assert venus.queue_gpus()["vcJsw"] == 256
    assert "vcP2J" not in venus.queue_gpus()  # VCs with no GPUs that day are left out
    earth = helios.helios_cluster("Earth", "2020-04-01")
    assert earth.total_gpus == 784
    assert all(n.gpus == 8 for n in earth.nodes)


def test_history_and_unknown_date():
    path = needs(helios.gpu_number_path("Venus"))
    history = helios.vc_gpu_history(path)
    assert len(history) == 181
    assert history[0][0] == "2020-04-01"
    with pytest.raises(ValueError, match="no row for date '1999-01-01'"):
        helios.read_vc_gpus(path, "1999-01-01")


def test_summary_reference_points():
    summary = helios.read_cluster_summary(needs(helios.SUMMARY_PATH))
    assert summary["Venus"]["gpu_num"] == 1022
    assert set(summary) == {"Venus", "Earth", "Saturn", "Uranus", "total"}  # no Philly row, despite the README


def test_total_mismatch_is_an_error(tmp_path):
    path = tmp_path / "x_cluster_gpu_number.csv"
    path.write_text("date,vcA,vcB,total\n2020-04-01,8,16,24\n2020-04-02,8,16,32\n")
    with pytest.raises(TraceFormatError, match=r":3: VC GPUs add up to 24, 'total' says 32"):
        helios.vc_gpu_history(path)


def test_uneven_vc_is_an_error(tmp_path):
    path = tmp_path / "x_cluster_gpu_number.csv"
    path.write_text("date,vcA,total\n2020-04-01,12,12\n")
    with pytest.raises(ValueError, match="not a multiple of 8"):
        helios.helios_cluster("x", path=path)
