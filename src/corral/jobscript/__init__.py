"""Job scripts in Slurm's terms: units, #SBATCH directives, submit options -> JobSubmit fields.

Pure and stdlib-only, so the command line starts fast and other front ends (an sbatch shim) can
share it. Names load on first use (PEP 562): `sbatch` imports only the submodules it needs."""
from __future__ import annotations

import sys

_WHERE = {
    "DirectiveToken": "directives", "check_script": "directives", "parse_directives": "directives",
    "wrap_script": "directives", "DirectiveError": "errors", "Opt": "getopt", "ParsedArgs": "getopt",
    "ParsedOption": "getopt", "parse_args": "getopt", "SUBMIT_OPTION_TABLE": "submission",
    "SUBMIT_OPTIONS": "submission", "build_submission": "submission", "format_duration": "units",
    "format_duration_short": "units", "parse_mem_mib": "units", "parse_time_s": "units",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'corral.jobscript' has no attribute {name!r}")
    # __import__ rather than importlib.import_module: `importlib` (with `warnings`) costs sbatch ~0.6 ms.
    __import__(f"corral.jobscript.{module}")
    value = getattr(sys.modules[f"corral.jobscript.{module}"], name)
    globals()[name] = value
    return value
