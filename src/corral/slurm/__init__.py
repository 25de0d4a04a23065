"""Slurm 22.05 compatibility: option parsing and output formatting for sbatch, squeue, sacct, scancel,
scontrol and sinfo, reproduced byte for byte from what real Slurm prints.

Everything here is pure and stdlib-only: the commands that import it must start in a few tens of
milliseconds, so this package imports nothing at its top level. Records are plain dicts shaped like
the API's JobOut / NodeOut / PartitionOut (see `records.py` for the optional fields and defaults).
Golden fixtures recorded from real Slurm live in tests/slurm/golden/.
"""
