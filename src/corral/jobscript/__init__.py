"""Job scripts in Slurm's terms: units, #SBATCH directives, submit options -> JobSubmit fields.

Pure and stdlib-only, so the command line starts fast and other front ends (an sbatch shim) can
share it."""
from corral.jobscript.directives import DirectiveToken, check_script, parse_directives, wrap_script
from corral.jobscript.errors import DirectiveError
from corral.jobscript.getopt import Option, ParsedArgs, ParsedOption, parse_args
from corral.jobscript.submission import SUBMIT_OPTION_TABLE, SUBMIT_OPTIONS, build_submission
from corral.jobscript.units import format_duration, format_duration_short, parse_mem_mib, parse_time_s

__all__ = [
    "SUBMIT_OPTIONS",
    "SUBMIT_OPTION_TABLE",
    "DirectiveError",
    "DirectiveToken",
    "Option",
    "ParsedArgs",
    "ParsedOption",
    "build_submission",
    "check_script",
    "format_duration",
    "format_duration_short",
    "parse_args",
    "parse_directives",
    "parse_mem_mib",
    "parse_time_s",
    "wrap_script",
]
