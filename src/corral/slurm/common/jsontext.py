"""JSON for the Slurm commands without importing `json`.

`import json` loads `re` (json.decoder and json.encoder compile patterns at import): about 6 ms of
a command that must start in a few tens. The C accelerator `_json` that json itself uses does the
real work here: its scanner decodes, its string quoting encodes. Where `_json` is missing (other
interpreters) this falls back to `json`."""
from __future__ import annotations

try:
    from _json import encode_basestring_ascii as _quote
    from _json import make_scanner as _make_scanner
except ImportError:  # pragma: no cover - CPython always has _json
    _quote = _make_scanner = None

_WHITESPACE = " \t\n\r"


class _DecoderSettings:
    """The attributes `_json.make_scanner` reads from a json.JSONDecoder (its defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # NaN, Infinity, -Infinity
    memo: dict = {}


_scan = _make_scanner(_DecoderSettings) if _make_scanner else None


def loads(text: str | bytes):
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if _scan is None:  # pragma: no cover
        import json
        return json.loads(text)
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise ValueError(f"invalid JSON at character {exc.value}") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"extra data after JSON at character {end}")
    return value


def dumps(value: object) -> str:
    """Compact JSON of None, bools, numbers, strings, lists, tuples and dicts with string keys."""
    if _quote is None:  # pragma: no cover
        import json
        return json.dumps(value, separators=(",", ":"))
    parts: list[str] = []
    _encode(value, parts)
    return "".join(parts)


def _encode(value: object, parts: list[str]) -> None:
    if value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, str):
        parts.append(_quote(value))
    elif isinstance(value, int):
        parts.append(int.__repr__(value))
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value!r} has no JSON form")
        parts.append(float.__repr__(value))
    elif isinstance(value, dict):
        _encode_object(value, parts)
    elif isinstance(value, (list, tuple)):
        _encode_array(value, parts)
    else:
        raise TypeError(f"{type(value).__name__} has no JSON form")


def _encode_object(value: dict[object, object], parts: list[str]) -> None:
    parts.append("{")
    for i, (key, item) in enumerate(value.items()):
        if not isinstance(key, str):
            raise TypeError(f"JSON object keys must be strings, not {type(key).__name__}")
        parts.append(("," if i else "") + _quote(key) + ":")
        _encode(item, parts)
    parts.append("}")


def _encode_array(value: list[object] | tuple[object, ...], parts: list[str]) -> None:
    parts.append("[")
    for i, item in enumerate(value):
        if i:
            parts.append(",")
        _encode(item, parts)
    parts.append("]")
