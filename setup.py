"""Builds the native task leader into the package (decision 0022): `pip install .`, a wheel and an sdist
carry `corral/agent/corral-task-leader`, compiled from `task_leader.c` by the system C compiler as the
Makefile's `$(LEADER)` rule does (the same flags, static where the C library allows). Without a compiler the
build stops and says so: a package without the program would start agents that fail every task. An editable
install (`make venv`) leaves it to the Makefile, which builds it beside its source.

The native command front-end (decision 0021) is not built here: it holds the installed environment's own
paths (its interpreter, its entry points), which a wheel cannot know; after installing a wheel,
`python -m corral.slurm.build_front` puts it in place, and the commands work without it."""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

LEADER_SOURCE = Path("src/corral/agent/task_leader.c")
LEADER = Path("corral/agent/corral-task-leader")
LEADER_CFLAGS = ["-O2", "-Wall", "-Wextra"]


def compile_leader(output: Path) -> None:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise SystemExit(f"corral: building {LEADER} needs a C compiler (cc or gcc, or set CC): install "
                         "Debian's gcc (or build-essential) and build again")
    output.parent.mkdir(parents=True, exist_ok=True)
    for linking in (["-static"], []):
        built = subprocess.run([compiler, *LEADER_CFLAGS, *linking, "-o", str(output), str(LEADER_SOURCE), "-lm"],
                               capture_output=True, text=True, check=False)
        if built.returncode == 0:
            output.chmod(0o755)
            return
    raise SystemExit(f"corral: {compiler} could not build {LEADER} from {LEADER_SOURCE}:\n{built.stderr}")


class BuildPyWithLeader(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            compile_leader(Path(self.build_lib) / LEADER)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        return outputs if self.editable_mode else [*outputs, str(Path(self.build_lib) / LEADER)]


class NativeDistribution(Distribution):
    """It holds a native program: its wheel is tagged for this platform, not `py3-none-any`."""

    def has_ext_modules(self) -> bool:
        return True


setup(distclass=NativeDistribution, cmdclass={"build_py": BuildPyWithLeader})
