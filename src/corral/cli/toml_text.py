"""Writing TOML for `corral tenancy show --toml` (the standard library reads TOML but does not write it).

Enough for JSON-shaped data: top-level keys, tables, arrays of tables, and inside those, scalars, lists
and inline tables. TOML has no null, so None values are left out (a reader gets the default back)."""
from __future__ import annotations

import json
import math
import re

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dumps(data: dict) -> str:
    """TOML text that tomllib reads back as `data` (less its None values)."""
    plain = {k: v for k, v in data.items() if v is not None and not _is_table(v) and not _is_table_array(v)}
    lines = [f"{_key(k)} = {_value(v)}" for k, v in plain.items()]
    for key, value in data.items():
        if _is_table(value):
            lines += ["", f"[{_key(key)}]", *_key_values(value)]
        elif _is_table_array(value):
            for item in value:
                lines += ["", f"[[{_key(key)}]]", *_key_values(item)]
    return "\n".join(lines).lstrip("\n") + "\n"


def _is_table(value: object) -> bool:
    return isinstance(value, dict)


def _is_table_array(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def _key_values(table: dict) -> list[str]:
    return [f"{_key(k)} = {_value(v)}" for k, v in table.items() if v is not None]


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        # A JSON string is a TOML basic string, but for DEL, which TOML wants escaped too.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items() if v is not None) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _float(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)
