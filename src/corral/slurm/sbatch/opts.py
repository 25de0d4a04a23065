"""sbatch's command line, SBATCH_* variables and #SBATCH directives -> a submission in JobSubmit terms.

Precedence, as documented by Slurm: the command line over SBATCH_* variables over #SBATCH lines.
Options stop at the script (what follows are its arguments); with no script and no --wrap the
script comes from stdin. Reading files and stdin is the caller's: `parse_sbatch` says where the
script is, `apply_script` reads its directives once the caller has the text."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral.jobscript.directives import UnmatchedQuote, parse_directives
from corral.jobscript.errors import DirectiveError
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.getopt import NO_ARG, CommandLine
from corral.slurm.common.optable import CommandSpec, check_support, parse_command_line
from corral.slurm.common.record import Record
from corral.slurm.sbatch import table
from corral.slurm.sbatch.values import EXPEDITE, fail, split_gpu_models, split_requeue

SPEC = CommandSpec(
    "sbatch", table.OPTIONS, getopt_exit=255, permute=False,
    ignored={k: why for k, (_, _, why) in table.IGNORED.items()}, unsupported=frozenset(table.UNSUPPORTED),
)
WRAP_HEADER = "# This script was created by sbatch --wrap."


class ScriptSource(Record):
    kind: str  # "file", "stdin" or "wrap"
    path: str | None = None
    args: tuple[str, ...] = ()  # the script's own arguments
    text: str | None = None  # the generated script of --wrap


class SbatchOptions(Record):
    command_line: Mapping[str, object] = {}  # field -> value, per source
    environment: Mapping[str, object] = {}
    script: Mapping[str, object] = {}
    parsable: bool = False
    wait: bool = False
    test_only: bool = False
    quiet: bool = False
    verbose: int = 0
    action: str | None = None  # "help", "usage" or "version"
    warnings: tuple[str, ...] = ()

    @property
    def submit(self) -> dict:
        """The submission: JobSubmit fields plus the extras (see sbatch.table.JOB). Only what the
        options set, and `batch` (sbatch runs its script once, on the first node); the caller adds
        script, workdir, env and user."""
        merged: dict = {"batch": True}
        for source in (self.script, self.environment, self.command_line):
            replaced = {table.GROUPS[f] for f in source if f in table.GROUPS}
            merged = {f: val for f, val in merged.items() if table.GROUPS.get(f) not in replaced}
            merged.update(source)
        return split_requeue(split_gpu_models({f: val for f, val in merged.items() if val is not None}))


def parse_sbatch(argv: Sequence[str], env: Mapping[str, str]) -> tuple[SbatchOptions, ScriptSource]:
    line = parse_command_line(SPEC, argv)
    for action in ("help", "usage", "version"):
        if line.has(action):
            return SbatchOptions(action=action), ScriptSource("stdin")
    warnings = check_support(SPEC, line)
    environment, env_warnings = _environment(env)
    options = SbatchOptions(
        command_line=_settings(line), environment=environment, parsable=line.has("parsable"),
        wait=line.has("wait") or "SBATCH_WAIT" in env, test_only=line.has("test-only"),
        quiet=line.has("quiet"), verbose=line.count("verbose"), warnings=tuple(env_warnings + warnings),
    )
    return _checked(options), _source(line)


def apply_script(options: SbatchOptions, script_text: str, script_name: str = "stdin") -> SbatchOptions:
    """Check the script as sbatch does and add its #SBATCH settings (lowest precedence).
    `script_name` (the file's base name, or "stdin") is what sbatch names in its messages."""
    check_batch_script(script_text)
    try:
        tokens = parse_directives(script_text)
    except UnmatchedQuote as exc:
        raise SlurmCommandError(f"sbatch: fatal: {script_name}: line {exc.line_number}: Unmatched `{exc.quote}` "
                                f"in [{exc.rest}]\n", 1) from None
    except DirectiveError as exc:
        raise fail(str(exc), 1) from None
    line = parse_command_line(SPEC, tokens)
    if line.positionals:
        raise fail(f"Invalid directive found in batch script: {line.positionals[0]}")
    warnings = check_support(SPEC, line)
    options = options.replace(script=_settings(line), parsable=options.parsable or line.has("parsable"),
                              warnings=options.warnings + tuple(warnings))
    return _checked(options)


def _checked(options: SbatchOptions) -> SbatchOptions:
    """Raise now for what only the merged fields show (two GPU types), not when a caller reads them."""
    _ = options.submit
    return options


def check_batch_script(text: str) -> None:
    if not text:
        raise fail("Batch script is empty!", 1)
    if not text.startswith("#!"):
        raise fail("This does not look like a batch script.  The first\n"
                   "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
                   "sbatch: error: For instance: #!/bin/sh", 1)
    if "\r\n" in text:
        raise fail("Batch script contains DOS line breaks (\\r\\n)\n"
                   "sbatch: error: instead of expected UNIX line breaks (\\n).", 1)


def wrap_script(command: str) -> str:
    return f"#!/bin/sh\n{WRAP_HEADER}\n\n{command}\n"


def submitted_line(job_id: int, *, parsable: bool, cluster: str | None = None) -> str:
    """sbatch's only stdout line."""
    if parsable:
        return f"{job_id};{cluster}\n" if cluster else f"{job_id}\n"
    return f"Submitted batch job {job_id}" + (f" on cluster {cluster}" if cluster else "") + "\n"


def _source(line: CommandLine) -> ScriptSource:
    wrap = line.last("wrap")
    if wrap is not None:
        if line.positionals:
            raise fail("Script arguments not permitted with --wrap option", 1)
        return ScriptSource("wrap", text=wrap_script(wrap))
    if line.positionals:
        return ScriptSource("file", line.positionals[0], tuple(line.positionals[1:]))
    return ScriptSource("stdin")


def _settings(line: CommandLine) -> dict[str, object]:
    """Job fields from one source's options, the last of each winning, as in sbatch."""
    settings: dict[str, object] = {}
    for key, value in line.options:
        if key not in table.JOB:
            continue
        _, _, name, convert = table.JOB[key]
        settings[name] = convert if isinstance(convert, bool) else convert(value, key)
    if sum(1 for f in table.MEMORY_FIELDS if f in settings) > 1:
        raise SlurmCommandError("sbatch: fatal: --mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.\n", 1)
    return settings


def _environment(env: Mapping[str, str]) -> tuple[dict[str, object], list[str]]:
    """SBATCH_* variables, read as the options they stand for (errors read the same)."""
    tokens = []
    for variable, key in table.ENV_VARS.items():
        if variable in env:
            # SBATCH_REQUEUE=<anything> stands for --requeue, as before --requeue took a value.
            flag = SPEC.option_named(key).arg == NO_ARG or key == "requeue" and env[variable] != EXPEDITE
            tokens.append(f"--{key}" if flag else f"--{key}={env[variable]}")
    line = parse_command_line(SPEC, tokens)
    return _settings(line), check_support(SPEC, line)


def invalid_partition(name: str) -> SlurmCommandError:
    """What sbatch prints when the controller does not know the partition."""
    return SlurmCommandError(f"sbatch: error: invalid partition specified: {name}\n"
                             "sbatch: error: Batch job submission failed: Invalid partition name specified\n", 1)
