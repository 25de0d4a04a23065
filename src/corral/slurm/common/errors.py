"""The one exception of the Slurm layer: what a command prints to stderr and the exit status it ends with."""
from __future__ import annotations


class SlurmCommandError(Exception):
    """A command must stop: print `stdout` and `stderr` (complete lines) and exit `exit_code`.

    Slurm's commands disagree on exit statuses (sbatch ends 255 after a getopt error, squeue 1), so
    each parser decides both the text and the status, from what real Slurm does."""

    def __init__(self, stderr: str, exit_code: int = 1, stdout: str = "") -> None:
        super().__init__(stderr.rstrip("\n"))
        self.stderr = stderr if stderr.endswith("\n") or not stderr else stderr + "\n"
        self.exit_code = exit_code
        self.stdout = stdout  # some errors also print usage, to stdout
