from __future__ import annotations

import sys
import types

import pytest

from corral.agent import discovery
from corral.agent.discovery import DiscoveryError, discover, group_domains, nvml_gpus, simulated_gpus


@pytest.mark.parametrize(
    ("n", "pairs", "expected"),
    [
        (0, [], []),
        (3, [], ["nvl0", "nvl1", "nvl2"]),  # no links: every GPU is its own island
        (4, [(0, 1), (2, 3)], ["nvl0", "nvl0", "nvl1", "nvl1"]),
        (4, [(3, 2), (1, 0)], ["nvl0", "nvl0", "nvl1", "nvl1"]),  # order and direction do not matter
        (4, [(0, 3)], ["nvl0", "nvl1", "nvl2", "nvl0"]),
        (4, [(0, 1), (1, 2), (2, 3)], ["nvl0"] * 4),  # transitive
        # NVSwitch: GPUs link to switches (ids >= n), never to each other, and still form one island.
        (4, [(0, 4), (1, 4), (2, 5), (3, 5), (1, 5)], ["nvl0"] * 4),
        (4, [(0, 4), (1, 4), (2, 5), (3, 5)], ["nvl0", "nvl0", "nvl1", "nvl1"]),
    ],
)
def test_group_domains(n, pairs, expected):
    assert group_domains(n, pairs) == expected


def test_group_domains_prefix():
    assert group_domains(2, [(0, 1)], prefix="pci") == ["pci0", "pci0"]


@pytest.mark.parametrize(
    ("count", "domains"),
    [
        (0, []),
        (1, ["nvl0"]),
        (2, ["nvl0", "nvl1"]),
        (3, ["nvl0", "nvl0", "nvl1"]),
        (8, ["nvl0"] * 4 + ["nvl1"] * 4),
    ],
)
def test_simulated_gpus_form_two_islands(count, domains):
    gpus = simulated_gpus(count)
    assert [g.domain for g in gpus] == domains
    assert [g.index for g in gpus] == list(range(count))
    assert [g.uuid for g in gpus] == [f"SIM-{i}" for i in range(count)]
    assert all(g.model == "sim-gpu" and g.memory_mib == 81920 for g in gpus)


def test_discover_simulated_with_overrides():
    inventory = discover(4, cpus=6, mem_mib=2048)
    assert (len(inventory.gpus), inventory.cpus, inventory.mem_mib, inventory.source) == (4, 6, 2048, "simulated")


def test_discover_reads_cpus_and_memory_from_the_host():
    inventory = discover(0)
    assert inventory.gpus == []
    assert inventory.cpus >= 1 and inventory.mem_mib > 0


def test_negative_simulated_count_is_an_error():
    with pytest.raises(DiscoveryError):
        discover(-1)


def test_nvml_failure_is_an_error_that_suggests_simulation(monkeypatch):
    pynvml = pytest.importorskip("pynvml")

    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    with pytest.raises(DiscoveryError, match="--gpus N"):
        discover(None)


def test_real_nvml_when_a_driver_is_present():
    try:
        inventory = discover(None)
    except DiscoveryError:
        pytest.skip("no NVIDIA driver on this machine")
    assert inventory.source == "nvml"
    assert [g.index for g in inventory.gpus] == list(range(len(inventory.gpus)))
    assert all(g.memory_mib > 0 and g.uuid and g.model for g in inventory.gpus)


# -- the NVML code path, against a stand-in for the pynvml module (this machine has no GPU)


class FakeNvmlError(Exception):
    pass


def fake_pynvml(gpu_count, nvlinks=None, ancestors=None):
    """A pynvml stand-in. nvlinks: {gpu: [remote bus numbers]} (bus = 0x10 + gpu for GPUs); ancestors:
    {(i, j): level}, or None for a driver that cannot report topology."""
    module = types.SimpleNamespace(
        NVMLError=FakeNvmlError,
        NVML_NVLINK_MAX_LINKS=18,
        NVML_FEATURE_ENABLED=1,
        NVML_TOPOLOGY_MULTIPLE=20,
        shutdowns=[],
    )
    pci = lambda bus: types.SimpleNamespace(domain=0, bus=bus, device=0)  # noqa: E731

    def link_state(handle, link):
        links = (nvlinks or {}).get(handle)
        if links is None or link >= len(links):
            raise FakeNvmlError("not supported")
        return 1

    def common_ancestor(a, b):
        if ancestors is None:
            raise FakeNvmlError("not supported")
        return ancestors.get((a, b), 50)

    module.nvmlInit = lambda: None
    module.nvmlShutdown = lambda: module.shutdowns.append(True)
    module.nvmlDeviceGetCount = lambda: gpu_count
    module.nvmlDeviceGetHandleByIndex = lambda i: i
    module.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"
    module.nvmlDeviceGetUUID = lambda h: f"GPU-{h:04d}"
    module.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=81559 * 1024 * 1024)
    module.nvmlDeviceGetPciInfo = lambda h: pci(0x10 + h)
    module.nvmlDeviceGetNvLinkState = link_state
    module.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: pci(nvlinks[h][link])
    module.nvmlDeviceGetTopologyCommonAncestor = common_ancestor
    module.nvmlDeviceGetMinorNumber = lambda h: 3 - h  # minor numbers need not follow NVML's order
    return module


def use_fake(monkeypatch, module):
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def test_nvml_devices_and_nvswitch_island(monkeypatch):
    switches = [0xA0, 0xA1]
    fake = use_fake(monkeypatch, fake_pynvml(4, nvlinks={g: switches for g in range(4)}))
    gpus, device_files = nvml_gpus()
    assert [g.domain for g in gpus] == ["nvl0"] * 4
    assert device_files == ("/dev/nvidia3", "/dev/nvidia2", "/dev/nvidia1", "/dev/nvidia0")
    assert gpus[1].model == "NVIDIA H100 80GB HBM3" and gpus[1].uuid == "GPU-0001"
    assert gpus[1].memory_mib == 81559
    assert fake.shutdowns == [True]


def test_nvml_direct_nvlink_pairs(monkeypatch):
    # GPUs 0-1 and 2-3 bridged pairwise (bus numbers 0x10 + index).
    use_fake(monkeypatch, fake_pynvml(4, nvlinks={0: [0x11], 1: [0x10], 2: [0x13], 3: [0x12]}))
    assert [g.domain for g in nvml_gpus()[0]] == ["nvl0", "nvl0", "nvl1", "nvl1"]


def test_nvml_falls_back_to_pcie_switches(monkeypatch):
    ancestors = {(0, 1): 20, (2, 3): 10, (0, 2): 40}
    use_fake(monkeypatch, fake_pynvml(4, ancestors=ancestors))
    assert [g.domain for g in nvml_gpus()[0]] == ["pci0", "pci0", "pci1", "pci1"]


def test_nvml_without_topology_leaves_domains_unknown(monkeypatch):
    use_fake(monkeypatch, fake_pynvml(2))
    assert [g.domain for g in nvml_gpus()[0]] == [None, None]


def test_nvml_query_failure_is_a_discovery_error(monkeypatch):
    fake = use_fake(monkeypatch, fake_pynvml(2))

    def broken(index):
        raise FakeNvmlError("GPU is lost")

    fake.nvmlDeviceGetHandleByIndex = broken
    with pytest.raises(DiscoveryError, match="GPU is lost"):
        nvml_gpus()
    assert fake.shutdowns == [True]


def test_module_does_not_import_pynvml_eagerly():
    assert "pynvml" not in vars(discovery)


def test_nvml_without_minor_numbers_gives_no_device_files(monkeypatch):
    fake = use_fake(monkeypatch, fake_pynvml(2))

    def no_minor(handle):
        raise FakeNvmlError("not supported")

    fake.nvmlDeviceGetMinorNumber = no_minor
    gpus, device_files = nvml_gpus()
    assert len(gpus) == 2 and device_files == ()
