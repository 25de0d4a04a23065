"""A root `corral up` says when other users cannot run its Slurm commands (issue 21, item 7): the check
against what a real user of this host meets when running a command of an installation under a 0700
directory, as /root is."""
from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from corral.cli.hostinfo import HostFacts
from corral.cli.shared_install import install_warning, unreachable_install
from corral.cli.up import banner
from corral.cli.up_identity import Recorded
from corral.cli.up_plan import UpOptions, plan_up

SYSTEM_PYTHON = Path("/usr/bin/python3")


@pytest.fixture
def envgaps_user():
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd")
    name = f"envgaps{secrets.token_hex(3)}"
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True)
    yield pwd.getpwnam(name)
    subprocess.run(["userdel", name], check=False)


@pytest.fixture
def install():
    """A stand-in installation: HOME/venv/bin/{python -> the system's, sbatch}, HOME/venv/lib/corral."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip(f"no {SYSTEM_PYTHON}")
    root = Path(tempfile.mkdtemp(prefix="corral-envgaps-install-"))
    root.chmod(0o755)
    home = root / "home"
    bin_dir, package = home / "venv" / "bin", home / "venv" / "lib" / "corral"
    bin_dir.mkdir(parents=True)
    package.mkdir(parents=True)
    (bin_dir / "python").symlink_to(SYSTEM_PYTHON)
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f"#!{bin_dir / 'python'}\nprint('ran')\n")
    sbatch.chmod(0o755)
    yield SimpleNamespace(home=home, bin=bin_dir, package=package, sbatch=sbatch)
    shutil.rmtree(root)


def run_as(user: pwd.struct_passwd, command: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", user.pw_name, "--", str(command)], capture_output=True, text=True,
                          cwd="/", timeout=30, check=False)


def test_an_install_under_a_closed_directory_is_named_and_really_closed(install, envgaps_user) -> None:
    install.home.chmod(0o700)
    problem = unreachable_install(str(install.bin), str(install.package))
    assert problem == f"{install.home} is not searchable by other users (mode 0700)"
    refused = run_as(envgaps_user, install.sbatch)
    assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused

    install.home.chmod(0o755)
    assert unreachable_install(str(install.bin), str(install.package)) is None
    ran = run_as(envgaps_user, install.sbatch)
    assert (ran.returncode, ran.stdout) == (0, "ran\n"), ran


def test_an_interpreter_others_may_not_run_is_named(install) -> None:
    private = install.home / "private-python"
    shutil.copy(SYSTEM_PYTHON, private)
    private.chmod(0o750)
    install.sbatch.write_text(f"#!{private}\n")
    assert unreachable_install(str(install.bin), str(install.package)) == (
        f"{private} is not executable by other users (mode 0750)")


def test_the_banner_carries_the_warning(tmp_path) -> None:
    plan = plan_up(UpOptions(state_dir=tmp_path), HostFacts(cpus=8, mem_mib=64000, nvml_gpus=None), python="py")
    warning = install_warning("/root is not searchable by other users (mode 0700)")
    text = banner(SimpleNamespace(plan=plan, name="lab", isolation=""), Recorded(config_path=tmp_path / "cluster.json"),
                  warnings=[warning])
    assert ("  warning:   other users cannot run the Slurm commands (/root is not searchable by other users "
            "(mode 0700)): their sbatch fails with 'bad interpreter: Permission denied'. Install corral where "
            "every user can read it, e.g. a virtual environment under /opt (docs/adding-a-machine.md, "
            "section 1)\n") in text

