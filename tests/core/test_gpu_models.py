"""Slurm-style GPU types derived from the names NVML reports (recorded from real devices), and matching
of requested models against them (corral.gpu_models)."""
from __future__ import annotations

import pytest

from corral import gpu_models

# NVML name -> (type, Slurm AutoDetect=nvml type, the type with the memory size, or None)
NVML_NAMES = [
    ("NVIDIA H100 80GB HBM3", "h100", "nvidia_h100_80gb_hbm3", "h100-80gb"),
    ("NVIDIA H100 PCIe", "h100", "nvidia_h100_pcie", None),
    ("NVIDIA H100 NVL", "h100", "nvidia_h100_nvl", None),
    ("NVIDIA H200", "h200", "nvidia_h200", None),
    ("NVIDIA GH200 480GB", "gh200", "nvidia_gh200_480gb", "gh200-480gb"),
    ("NVIDIA B200", "b200", "nvidia_b200", None),
    ("NVIDIA A100-SXM4-80GB", "a100", "nvidia_a100-sxm4-80gb", "a100-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100", "nvidia_a100-sxm4-40gb", "a100-40gb"),
    ("NVIDIA A100 80GB PCIe", "a100", "nvidia_a100_80gb_pcie", "a100-80gb"),
    ("NVIDIA A100-PCIE-40GB", "a100", "nvidia_a100-pcie-40gb", "a100-40gb"),
    ("Tesla V100-SXM2-32GB", "v100", "tesla_v100-sxm2-32gb", "v100-32gb"),
    ("Tesla V100-PCIE-16GB", "v100", "tesla_v100-pcie-16gb", "v100-16gb"),
    ("Tesla T4", "t4", "tesla_t4", None),
    ("NVIDIA A10G", "a10g", "nvidia_a10g", None),
    ("NVIDIA A10", "a10", "nvidia_a10", None),
    ("NVIDIA L4", "l4", "nvidia_l4", None),
    ("NVIDIA L40S", "l40s", "nvidia_l40s", None),
    ("NVIDIA GeForce RTX 4090", "rtx4090", "nvidia_geforce_rtx_4090", None),
    ("NVIDIA GeForce RTX 3090", "rtx3090", "nvidia_geforce_rtx_3090", None),
    ("NVIDIA RTX A6000", "rtxa6000", "nvidia_rtx_a6000", None),
]


@pytest.mark.parametrize(("name", "kind", "autodetect", "with_memory"), NVML_NAMES)
def test_type_derived_from_the_nvml_name(name, kind, autodetect, with_memory):
    assert gpu_models.gpu_type(name) == kind
    assert gpu_models.slurm_autodetect_name(name) == autodetect
    spellings = [name, autodetect, kind, kind.upper(), name.upper()] + ([with_memory] if with_memory else [])
    for spelling in spellings:
        assert gpu_models.matches(name, spelling), spelling
    if with_memory:
        assert gpu_models.matches(name, with_memory.replace("-", "_").upper())


@pytest.mark.parametrize(("name", "other"), [
    ("NVIDIA A100-SXM4-40GB", "a100-80gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-40gb"),
    ("NVIDIA A10G", "a10"),
    ("NVIDIA A10", "a100"),
    ("NVIDIA H100 PCIe", "nvidia_h100_80gb_hbm3"),
    ("NVIDIA H200", "h100"),
    ("NVIDIA GH200 480GB", "h200"),
    ("NVIDIA L40S", "l40"),
    ("NVIDIA L4", "l40s"),
    ("Tesla V100-SXM2-32GB", "t4"),
    ("NVIDIA GeForce RTX 4090", "rtx3090"),
])
def test_other_models_do_not_match(name, other):
    assert not gpu_models.matches(name, other)


def test_names_without_a_model_number_have_no_type_and_match_by_name_only():
    assert gpu_models.gpu_type("sim-gpu") == ""
    assert gpu_models.gpu_type("NVIDIA TITAN RTX") == ""
    assert gpu_models.matches("sim-gpu", "SIM_GPU") and not gpu_models.matches("sim-gpu", "gpu")
    assert gpu_models.gres("sim-gpu", 4) == "gpu:4"


def test_alternatives_and_the_empty_constraint():
    assert gpu_models.matches("NVIDIA H100 80GB HBM3", "")
    assert gpu_models.matches("NVIDIA H100 80GB HBM3", "a100|H100")
    assert not gpu_models.matches("NVIDIA L4", "a100|h100")


def test_rtx_cards_answer_to_their_model_number_too():
    assert gpu_models.matches("NVIDIA RTX A6000", "a6000")
    assert gpu_models.matches("NVIDIA RTX A6000", "rtx_a6000")
    assert gpu_models.matches("NVIDIA GeForce RTX 4090", "rtx_4090")


@pytest.mark.parametrize(("flavor", "constraint", "placed_with"), [
    ("h100", "", "h100"),
    ("h100", "H100", "h100"),
    ("h100", "nvidia_h100_80gb_hbm3", "nvidia_h100_80gb_hbm3"),  # narrower than the flavor
    ("a100-80gb", "a100", "a100-80gb"),
    ("a100", "a100-80gb", "a100-80gb"),
    ("a100", "v100|A100_80GB", "A100_80GB"),
    ("v100", "a100", None),
    ("a100-40gb", "a100-80gb", None),
])
def test_within_flavor(flavor, constraint, placed_with):
    assert gpu_models.within_flavor(flavor, constraint) == placed_with


def test_display_forms():
    assert gpu_models.describe("NVIDIA H100 80GB HBM3") == "h100 (NVIDIA H100 80GB HBM3)"
    assert gpu_models.describe("sim-gpu") == "sim-gpu"
    assert gpu_models.describe("h100") == "h100"
    assert gpu_models.gres("NVIDIA H100 80GB HBM3", 8) == "gpu:h100:8"
