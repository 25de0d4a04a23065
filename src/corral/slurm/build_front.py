"""Build and install the native front-end of sbatch, squeue, sacct, scancel and corral (front.c;
docs/decisions/0021-native-front-end.md). `make venv` runs it after `pip install -e .`:

    python -m corral.slurm.build_front [--scripts DIR]

pip writes each command's console script into the environment's scripts directory (`.venv/bin`); this moves
those scripts to ENTRY_POINTS (`.venv/libexec/corral`), where the front-end execs them whenever the user's
command helper does not take a call, and puts the compiled front-end in their place. Run again after pip
rewrote the scripts (a reinstall) it moves the new ones. Without a C compiler it says so and leaves the
Python scripts where they are: every command still works, each call starting its own interpreter."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from corral.slurm import front

SOURCE = Path(__file__).with_name("front.c")
FRONTED = (*front.COMMANDS, front.CORRAL)
ELF_MAGIC = b"\x7fELF"


class BuildError(Exception):
    pass


def entry_points_dir(prefix: str = sys.prefix) -> Path:
    return Path(prefix) / "libexec" / "corral"


def c_string(data: bytes) -> str:
    """A C string literal of exactly these bytes (octal escapes: a fixed three digits each)."""
    return '"' + "".join(f"\\{byte:03o}" for byte in data) + '"'


def config_header(entry_points: Path, python: str = sys.executable) -> str:
    """front_config.h: what names the helper's socket (corral.slurm.front.fingerprint: the interpreter,
    front.py, the Python version, the start variables), where the Python entry points are, and the protocol's
    constants, all from corral.slurm.front: one source for both sides."""
    prefix = "\0".join([python, front.__file__, sys.version]).encode(errors="surrogateescape")
    return "".join([
        f"#define FINGERPRINT_PREFIX {c_string(prefix)}\n",
        f"#define FINGERPRINT_PREFIX_LEN {len(prefix)}u\n",
        f"#define ENTRY_POINTS {c_string(os.fsencode(entry_points))}\n",
        f"#define PROTOCOL {c_string(front.PROTOCOL)}\n",
        f"#define HELPER_SWITCH {c_string(front.HELPER_SWITCH.encode())}\n",
        f"#define FALLBACK_MARK {c_string(front.FALLBACK_MARK.encode())}\n",
        f"#define FALLBACK_ABSENT {c_string(front.ABSENT.encode())}\n",
        f"#define FALLBACK_REFUSED {c_string(front.REFUSED.encode())}\n",
        f"#define ACCEPTED {front.ACCEPTED[0]}\n",
        f"#define START_VARIABLES_LIST {_c_list(front.START_VARIABLES)}\n",
        f"#define SLURM_COMMANDS_LIST {_c_list(front.COMMANDS)}\n",
        f"#define CORRAL_COMMAND {c_string(front.CORRAL.encode())}\n",
        f"#define CORRAL_SUBCOMMANDS_LIST {_c_list(front.CORRAL_SUBCOMMANDS)}\n",
    ])


def _c_list(names: tuple[str, ...]) -> str:
    return "{" + ", ".join(c_string(name.encode()) for name in names) + ", NULL}"


def compile_front(output: Path, entry_points: Path, compiler: str | None = None,
                  python: str = sys.executable) -> Path:
    """Compile front.c into `output`, execing the entry points in `entry_points`."""
    cc = compiler or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise BuildError("no C compiler (cc or gcc; set CC)")
    with tempfile.TemporaryDirectory(prefix="corral-front-") as tmp:
        Path(tmp, "front_config.h").write_text(config_header(entry_points, python))
        built = Path(tmp, "front")
        command = [cc, "-O2", "-Wall", "-Wextra", "-I", tmp, "-o", str(built), str(SOURCE)]
        # Linked statically where the C library allows: no dynamic loader at each call (0.1 ms of CPU and
        # 0.2-0.4 ms of wall time per call here, measured with perf stat); else dynamically.
        proc = subprocess.run([*command, "-static"], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            proc = subprocess.run(command, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BuildError(f"{cc} failed on {SOURCE}:\n{proc.stderr}")
        shutil.copyfile(built, output)
    output.chmod(0o755)
    return output


def install(scripts: Path, entry_points: Path, compiler: str | None = None) -> list[str]:
    """Put the front-end in place of each command's console script in `scripts`, the scripts into
    `entry_points`; the commands installed. Every script is checked before anything moves."""
    moves = []
    for command in FRONTED:
        script, entry = scripts / command, entry_points / command
        if _is_python_script(script):
            moves.append((script, entry))
        elif not entry.is_file():
            raise BuildError(f"{script}: no console script to put behind the front-end (run pip install -e . first)")
    entry_points.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="corral-front-", dir=scripts) as tmp:
        binary = compile_front(Path(tmp, "front"), entry_points, compiler)
        for script, entry in moves:
            os.replace(script, entry)
        for command in FRONTED:  # each atomically: a call never finds the command missing
            staged = Path(tmp, command)
            shutil.copyfile(binary, staged)
            staged.chmod(0o755)
            os.replace(staged, scripts / command)
    return list(FRONTED)


def _is_python_script(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            return file.read(2) == b"#!"
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build and install corral's native command front-end.")
    parser.add_argument("--scripts", type=Path, default=Path(sysconfig.get_path("scripts")),
                        help="the console scripts' directory (default: this environment's)")
    args = parser.parse_args(argv)
    try:
        installed = install(args.scripts, entry_points_dir())
    except BuildError as exc:
        print(f"corral: the native command front-end was not installed: {exc}\n"
              f"corral: {', '.join(FRONTED)} stay Python scripts: they work, each call starting an interpreter "
              "(tens of milliseconds more); install a C compiler and run `make venv` again", file=sys.stderr)
        return 0
    print(f"corral: native front-end installed for {', '.join(installed)} in {args.scripts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
