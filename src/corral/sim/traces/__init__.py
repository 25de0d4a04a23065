"""Readers for the public GPU-cluster traces and for corral's and Slurm's own accounting.

Every reader streams its input (csv/gzip, no pandas), returns plain `corral.sim.workload` objects,
and raises `TraceFormatError` naming the file and line of the first malformed record.
"""
from corral.sim.traces._csv import TRACES_DIR, TraceFormatError

__all__ = ["TRACES_DIR", "TraceFormatError"]
