"""The controller's configuration file: a partition's hostlist is checked when the file is read."""
from __future__ import annotations

import pytest

from corral.controller.settings import SettingsError, settings_from_dict
from corral.engine.pacer import LIVE_MIN_INTERVAL_S


@pytest.mark.parametrize(("nodes", "problem"), [
    ("n[1-", "unbalanced '['"),
    ("n[1-100000]", "names more than 65536 hosts"),
])
def test_a_bad_partition_hostlist_is_a_settings_error(nodes, problem) -> None:
    with pytest.raises(SettingsError) as caught:
        settings_from_dict({"partitions": [{"name": "gpu", "nodes": nodes}]}, "corral.toml")
    assert str(caught.value).startswith("corral.toml partitions[0]: nodes: ") and problem in str(caught.value)
    config = settings_from_dict({"partitions": [{"name": "gpu", "nodes": "n[1-4]"}]})  # a good one is kept
    assert config.partitions[0].contains("n3") and not config.partitions[0].contains("n5")


def test_gpu_idle_cancel_s_is_read_and_checked() -> None:
    assert settings_from_dict({}).gpu_idle_cancel_s == 0
    assert settings_from_dict({"gpu_idle_cancel_s": 3600}).gpu_idle_cancel_s == 3600
    with pytest.raises(SettingsError, match="gpu_idle_cancel_s must be a number of seconds, 0 or more, not 'x'"):
        settings_from_dict({"gpu_idle_cancel_s": "x"})


def test_min_cycle_interval_s_is_read_and_checked() -> None:
    assert settings_from_dict({}).min_cycle_interval_s == LIVE_MIN_INTERVAL_S == 0.05
    assert settings_from_dict({"min_cycle_interval_s": 0}).min_cycle_interval_s == 0
    with pytest.raises(SettingsError, match="min_cycle_interval_s must be a number of seconds, 0 or more, not '1s'"):
        settings_from_dict({"min_cycle_interval_s": "1s"})


def test_gpu_idle_flag_s_is_read_and_checked() -> None:
    assert settings_from_dict({}).gpu_idle_flag_s == 1800
    assert settings_from_dict({"gpu_idle_flag_s": 0}).gpu_idle_flag_s == 0
    with pytest.raises(SettingsError, match="gpu_idle_flag_s must be a number of seconds, 0 or more, not -5"):
        settings_from_dict({"gpu_idle_flag_s": -5})


def test_expedite_hold_s_is_read_and_checked() -> None:
    assert settings_from_dict({"expedite_hold_s": 60}).expedite_hold_s == 60
    with pytest.raises(SettingsError, match="expedite_hold_s must be a number of seconds, 0 or more, not -1"):
        settings_from_dict({"expedite_hold_s": -1})


def test_launch_parameters_are_read_and_checked() -> None:
    assert settings_from_dict({}).launch_parameters == ()
    assert settings_from_dict({"launch_parameters": ["use_interactive_step"]}).launch_parameters == (
        "use_interactive_step",)
    with pytest.raises(SettingsError, match="launch_parameters: unknown 'enable_nss_slurm'; corral knows "
                                            "use_interactive_step"):
        settings_from_dict({"launch_parameters": ["use_interactive_step", "enable_nss_slurm"]})
    with pytest.raises(SettingsError, match="launch_parameters must be a list of strings"):
        settings_from_dict({"launch_parameters": "use_interactive_step"})


def test_salloc_asks_for_the_interactive_step_by_the_config_s_name() -> None:
    import inspect

    from corral.engine.config import USE_INTERACTIVE_STEP
    from corral.slurm.salloc import main as salloc

    assert f'"{USE_INTERACTIVE_STEP}"' in inspect.getsource(salloc._uses_interactive_step)
