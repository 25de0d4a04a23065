"""The Slurm-compatible commands (sbatch, squeue, sacct, scancel, scontrol, sinfo, sprio): one module
and one `main(argv=None) -> int` each, wired to corral's controller over its REST API.

Each command parses with corral.slurm's pure parsers, fetches what it needs (corral.slurm.http),
formats with corral.slurm's pure formatters and prints; common.py has what they share. Like the
rest of corral.slurm they import no heavy libraries, so that they start in tens of milliseconds."""
