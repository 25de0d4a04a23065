"""Slurm's duration texts. Import-free on purpose: squeue and sacct print durations and must start in
milliseconds, without the `re` that the rest of corral.jobscript.units needs."""
from __future__ import annotations


def _split_seconds(seconds: float) -> tuple[int, int, int, int]:
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return days, hours, minutes, secs


def format_duration(seconds: float) -> str:
    """Slurm's elapsed form (sacct Elapsed, TimeLimit): `HH:MM:SS`, or `D-HH:MM:SS` from one day."""
    days, hours, minutes, secs = _split_seconds(seconds)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


# format_duration_short's texts by whole second: a 100,000-job squeue prints the same few durations (every
# pending job's 0:00) over and over. Cleared when full, so it never grows with what it is asked.
_SHORT_TEXTS: dict[int, str] = {}
_SHORT_TEXTS_MAX = 4096


def format_duration_short(seconds: float) -> str:
    """squeue's TIME form: `M:SS`, `H:MM:SS`, or `D-HH:MM:SS`."""
    whole = max(0, int(seconds))
    text = _SHORT_TEXTS.get(whole)
    if text is None:
        if len(_SHORT_TEXTS) >= _SHORT_TEXTS_MAX:
            _SHORT_TEXTS.clear()
        text = _SHORT_TEXTS[whole] = _short_text(whole)
    return text


def _short_text(seconds: int) -> str:
    days, hours, minutes, secs = _split_seconds(seconds)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"
