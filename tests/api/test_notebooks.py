"""What `corral notebook` asks for (api/notebooks.py), checked by the same ServiceSpec the controller
uses, and its wrapper run for real by /bin/sh: a missing `jupyter` says so and exits 127; a present one is
started with the session's base URL and the agent's port, Jupyter's own culling off (the controller judges
idleness), and SIGTERM writes the warning."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from corral.api.notebooks import gres_request, jupyter_command, session_spec
from corral.api.services import ServiceSpec


def test_the_spec_is_a_valid_session_with_the_callers_environment_only():
    body = session_spec(name="nb-alice-1a2b", workdir="/home/alice", time_limit_s=4 * 3600, gpus=1, idle_s=1800,
                        qos="notebooks", environ={"PATH": "/venv/bin:/usr/bin", "VIRTUAL_ENV": "/venv", "SECRET": "x"})
    spec = ServiceSpec.model_validate(body)
    assert (spec.session, spec.replicas, spec.gpus_per_node, spec.time_limit_s, spec.qos) == (
        True, 1, 1, 14400, "notebooks")
    assert spec.env == {"PATH": "/venv/bin:/usr/bin", "VIRTUAL_ENV": "/venv"}
    assert spec.idle_timeout_s == 1800
    assert spec.probes.readiness is not None and spec.probes.readiness.http is not None
    assert spec.probes.readiness.http.path == "/s/nb-alice-1a2b/api"


def fake_jupyter(tmp_path: Path) -> Path:
    """A stand-in `jupyter` that records its arguments and sleeps like a server."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "jupyter"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/args\nexec sleep 60\n')
    script.chmod(0o755)
    return bin_dir


def run_wrapper(tmp_path: Path, jupyter: str, path: str) -> subprocess.Popen:
    argv = jupyter_command("nb-x", jupyter)
    env = {"PATH": path, "CORRAL_PORT_HTTP": "41234", "CORRAL_JOB_ID": "7", "CORRAL_SESSION_SECRET": "s3cret"}
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_jupyter_not_on_the_path_is_named_and_exits_127(tmp_path):
    process = run_wrapper(tmp_path, "jupyter-nowhere", "/usr/bin:/bin")
    _, err = process.communicate(timeout=10)
    assert process.returncode == 127
    assert err.startswith("corral notebook: jupyter-nowhere is not found on ")
    assert "(PATH=/usr/bin:/bin)" in err


def test_a_jupyter_named_with_shell_text_is_only_named(tmp_path):
    """The dashboard's form takes any text: it is a name to look for and to print, never shell code."""
    marker = tmp_path / "ran"
    name = f'jupyter$(touch {marker})"`touch {marker}`'
    process = run_wrapper(tmp_path, name, "/usr/bin:/bin")
    _, err = process.communicate(timeout=10)
    assert process.returncode == 127 and err.startswith(f"corral notebook: {name} is not found on "), err
    assert not marker.exists()


def test_jupyterlab_is_given_a_page_config_without_its_token(tmp_path):
    """Its pages would carry the session's secret to the browser (api/notebooks.py)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "jupyter"
    script.write_text(f'#!/bin/sh\ncat "${{JUPYTER_CONFIG_PATH%%:*}}/labconfig/page_config.json" > {tmp_path}/page\n')
    script.chmod(0o755)
    process = run_wrapper(tmp_path, "jupyter", f"{bin_dir}:/usr/bin:/bin")
    process.communicate(timeout=10)
    assert process.returncode == 0
    assert json.loads((tmp_path / "page").read_text()) == {"token": ""}


def test_jupyter_gets_the_base_url_and_port_culls_nothing_itself_and_sigterm_warns(tmp_path):
    process = run_wrapper(tmp_path, "jupyter", f"{fake_jupyter(tmp_path)}:/usr/bin:/bin")
    args_file = tmp_path / "args"
    deadline = time.monotonic() + 10
    while not args_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    args = args_file.read_text().splitlines()
    assert args[0] == "lab" and "--port=41234" in args
    assert "--ServerApp.base_url=/s/nb-x/" in args and "--IdentityProvider.token=s3cret" in args
    # Jupyter's culling would kill a kernel that is idle while a thread of it keeps the GPU busy.
    assert not [arg for arg in args if "cull" in arg or "shutdown_no_activity" in arg], args
    os.kill(process.pid, signal.SIGTERM)
    _, err = process.communicate(timeout=10)
    assert "corral notebook: WARNING: this session is being stopped now" in err and "corral show 7" in err


def test_gres_gives_whole_gpus_or_a_share_of_one_and_refuses_the_rest():
    assert gres_request("gpu:2") == (2, None)
    assert gres_request("shard:2") == (1, "shard:2")
    assert gres_request("mps:25") == (1, "mps:25")
    for bad in ("shard:0", "mps", "tpu:1", "shard:x"):
        with pytest.raises(ValueError, match="give gpu:N, shard:N or mps:P"):
            gres_request(bad)
    spec = ServiceSpec.model_validate(session_spec(name="nb", workdir="/w", time_limit_s=60, gpus=1,
                                                   gpu_share="shard:2"))
    assert (spec.gpus_per_node, spec.gpu_share) == (1, "shard:2")
    with pytest.raises(ValueError, match="only a session .* is stopped when idle"):
        ServiceSpec.model_validate({**session_spec(name="nb", workdir="/w", time_limit_s=60, gpus=1, idle_s=60),
                                    "session": False})
    with pytest.raises(ValueError, match="needs gpus_per_node = 1, not 2"):
        ServiceSpec.model_validate(session_spec(name="nb", workdir="/w", time_limit_s=60, gpus=2,
                                                gpu_share="shard:2"))
