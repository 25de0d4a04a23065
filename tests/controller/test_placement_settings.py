"""`[scheduler] placement`, `fgd_cpu_weight` and `task_mix` in the controller's config file: what they
become in the scheduler's configuration, and a specific error for each kind of bad value."""
from __future__ import annotations

import pytest

from corral.controller.settings import SettingsError, settings_from_dict
from corral.core.model import TaskShape
from corral.core.placement.bestfit import BestFit
from corral.core.placement.fgd import Fgd


def scheduler(**keys):
    return settings_from_dict({"scheduler": keys}).scheduler


def test_the_placement_policy_is_resolved_from_the_file() -> None:
    assert scheduler().placement_policy is BestFit
    config = scheduler(placement="fgd+cpu", fgd_cpu_weight=0.5,
                       task_mix=[{"gpus": 1, "gpu_milli": 500, "cpus": 4, "weight": 3},
                                 {"gpus": 8, "cpus": 64, "gpu_model": "h100"}])
    assert config.task_mix == ((TaskShape(1, 500, 4), 3.0), (TaskShape(8, 1000, 64, "h100"), 1.0))
    assert config.placement_policy.func is Fgd
    assert config.placement_policy.args[0].cpu_weight == 0.5


@pytest.mark.parametrize(("keys", "message"), [
    ({"placement": "worstfit"}, r"placement 'worstfit': one of bestfit, fgd, fgd\+cpu"),
    ({"placement": "fgd"}, "placement 'fgd' needs task_mix"),
    ({"placement": "fgd", "task_mix": []}, "placement 'fgd' needs task_mix"),
    ({"task_mix": [{"gpus": 1}]}, "task_mix is for placement"),
    ({"placement": "fgd", "fgd_cpu_weight": 0.3, "task_mix": [{"gpus": 1}]},
     "fgd_cpu_weight is for placement \"fgd\\+cpu\", not 'fgd'"),
    ({"placement": "fgd+cpu", "fgd_cpu_weight": -1, "task_mix": [{"gpus": 1}]}, "fgd_cpu_weight -1: a number >= 0"),
    ({"placement": "fgd", "task_mix": [3]}, r"task_mix\[0\]: a table"),
    ({"placement": "fgd", "task_mix": [{"cpus": 2}]}, r"task_mix\[0\]: gpus is required"),
    ({"placement": "fgd", "task_mix": [{"gpus": 1}, {"gpus": 0}]}, r"task_mix\[1\]: gpus 0"),
    ({"placement": "fgd", "task_mix": [{"gpus": 2, "gpu_milli": 500}]}, "below 1000 only with gpus = 1"),
    ({"placement": "fgd", "task_mix": [{"gpus": 1, "gpu_milli": 1500}]}, "gpu_milli 1500: 1..1000"),
    ({"placement": "fgd", "task_mix": [{"gpus": 1, "cpus": "4"}]}, "cpus '4': a whole number"),
    ({"placement": "fgd", "task_mix": [{"gpus": 1, "weight": 0}]}, "weight 0: a number > 0"),
    ({"placement": "fgd", "task_mix": [{"gpus": 1, "gpu": 2}]}, r"task_mix\[0\]: unknown key\(s\) gpu"),
])
def test_bad_placement_settings_are_refused_by_name(keys, message) -> None:
    with pytest.raises(SettingsError, match=message):
        scheduler(**keys)


def test_shards_per_gpu_is_read_from_the_file_and_checked() -> None:
    assert settings_from_dict({}).shards_per_gpu == 8
    assert settings_from_dict({"shards_per_gpu": 4}).shards_per_gpu == 4
    for bad in (0, 1001, 2.5, "8"):
        with pytest.raises(SettingsError, match="shards_per_gpu must be an integer from 1 to 1000"):
            settings_from_dict({"shards_per_gpu": bad})
