"""The parsers sbatch runs on every submission match by hand, without `re` (which costs a command
~7 ms of start-up). Each is checked here against the regular expression that states its grammar."""
from __future__ import annotations

import re
import shlex

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.jobscript import directives, units, values
from corral.jobscript.errors import DirectiveError
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sbatch import values as sbatch_values

PIECES = list("0123456789:-@_., \t'\"\\#KMGTkmgtBbRrxa") + [
    "\u0663", "\u212a", "\x0b", "SBATCH", "#SBATCH", "#CORRAL", "\n", "gpu", "a100", "USR2", "SIG", "SIG_DFL",
    "IOT", "RTMIN", "none"]
TEXT = st.lists(st.sampled_from(PIECES), max_size=14).map("".join)
MANY = settings(max_examples=400, deadline=None)

TIME = [(re.compile(p.replace("N", r"(\d+)")), w) for p, w in [
    ("N", (60,)), ("N:N", (60, 1)), ("N:N:N", (3600, 60, 1)), ("N-N", (86400, 3600)),
    ("N-N:N", (86400, 3600, 60)), ("N-N:N:N", (86400, 3600, 60, 1))]]
MEM = re.compile(r"(\d+)([KMGT]?)B?", re.IGNORECASE)
TYPED_COUNT = re.compile(r"(?:([A-Za-z0-9_.-]+):)?(\d+)")
GRES_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
NAME = re.compile(r"[A-Za-z0-9_.@+-]+")
SIGNAL = re.compile(r"(?:([RB]{1,2}):)?([A-Za-z0-9]+)(?:@(\d+))?")
DIRECTIVE = re.compile(r"(#SBATCH|#CORRAL)(?:\s+(.*))?")


def outcome(function, *args):
    try:
        return function(*args)
    except (DirectiveError, SlurmCommandError):
        return "refused"


@MANY
@given(TEXT)
def test_time_limits(text):
    cleaned = text.strip()
    match = next((m for m in (p.fullmatch(cleaned) for p, _ in TIME) if m), None)
    got = outcome(units.parse_time_s, text)
    if match is None:
        assert got == "refused"
        return
    weights = next(w for p, w in TIME if p.fullmatch(cleaned))
    seconds = sum(int(v) * w for v, w in zip(match.groups(), weights, strict=True))
    if got == "refused":  # zero and unlimited limits are refused before the grammar, and limits past the longest
        assert cleaned.lower() in ("-1",) or set(cleaned) <= set("0:-") or seconds > units.TIME_LIMIT_S_MAX
        return
    assert got == seconds


@MANY
@given(TEXT)
def test_memory_sizes(text):
    match = MEM.fullmatch(text.strip())
    got = outcome(units.parse_mem_mib, text)
    if match is None or match.group(2).upper() not in ("", "K", "M", "G", "T"):  # U+212A KELVIN SIGN
        assert got == "refused"
    else:
        amount, unit = int(match.group(1)), match.group(2).upper()
        mib = -(-amount // 1024) if unit == "K" else amount * {"": 1, "M": 1, "G": 1024, "T": 1 << 20}[unit]
        assert got == (mib if mib <= units.MEM_MIB_MAX else "refused"), "sizes past the largest one are refused"


@MANY
@given(TEXT)
def test_gpu_counts_and_names(text):
    match = TYPED_COUNT.fullmatch(text.strip())
    got = outcome(values.gpu_count, text)
    assert got == ("refused" if match is None else values.GpuRequest(int(match.group(2)), match.group(1)))
    name = text.strip()
    assert outcome(values.single_name, text) == (
        name if name and "," not in name and NAME.fullmatch(name) else "refused")
    assert values._is_gres_type(text) == bool(GRES_TYPE.fullmatch(text))


def signal_reference(value: str) -> dict | str:
    """The regex and `signal` module version sbatch had before."""
    import signal

    match = SIGNAL.fullmatch(value)
    if not match:
        return "refused"
    name = match.group(2)
    if name.isdigit():
        number = int(name) if 0 < int(name) < 65 else None
    else:
        upper = name.upper()
        found = getattr(signal, upper if upper.startswith("SIG") else f"SIG{upper}", None)
        number = int(found) if isinstance(found, signal.Signals) else None
    if number is None:
        return "refused"
    flags = match.group(1) or ""
    return {"signal": number, "time_s": int(match.group(3)) if match.group(3) else 60,
            "batch_only": "B" in flags, "reservation": "R" in flags}


@MANY
@given(TEXT)
def test_signal_specs(text):
    assert outcome(sbatch_values.parse_signal_spec, text) == signal_reference(text)


def test_signal_names():
    for text in ("USR2@90", "B:sigusr2", "RB:IOT@0", "rtmax", "9", "64", "65", "0", "_DFL", "SIG_IGN", "BLOCK",
                 "NSIG", "B:", ":USR2", "BBB:USR2", "USR2@", "USR2@9@9"):
        assert outcome(sbatch_values.parse_signal_spec, text) == signal_reference(text), text


@MANY
@given(st.lists(TEXT, max_size=5))
def test_directive_lines(lines):
    script = "#!/bin/sh\n" + "\n".join(lines)
    expected = []
    for line in script.splitlines()[1:]:
        match = DIRECTIVE.fullmatch(line.rstrip())
        if match:
            rest = match.group(2) or ""
            try:
                expected.extend(shlex.split(rest[: directives._scan(rest)[0]]))
            except ValueError:
                expected = "refused"
                break
            continue
        if line.strip() and not line.strip().startswith("#"):
            break
    assert outcome(directives.parse_directives, script) == expected
