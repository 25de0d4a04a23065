"""Small immutable value classes, declared like dataclasses, without importing dataclasses.

`dataclasses` pulls in `inspect` and generates code per class: about 12 ms, a third of the start-up
budget of the Slurm commands. A subclass of Record declares its fields as annotations, with
optional defaults (immutable ones: they are shared); it gets __slots__, keyword/positional
construction, equality, repr and `replace()`."""
from __future__ import annotations


class _RecordType(type):
    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict):
        if not bases:  # Record itself: its annotations describe the class, not fields
            namespace["__slots__"] = ()
            return super().__new__(mcs, name, bases, namespace)
        fields = tuple(namespace.get("__annotations__", {}))
        namespace["_defaults"] = {f: namespace.pop(f) for f in fields if f in namespace}
        namespace["_fields"] = fields
        namespace["__slots__"] = fields
        return super().__new__(mcs, name, bases, namespace)


class Record(metaclass=_RecordType):
    _fields: tuple[str, ...]
    _defaults: dict[str, object]

    def __init__(self, *args: object, **kwargs: object) -> None:
        if len(args) > len(self._fields):
            raise TypeError(f"{type(self).__name__} takes at most {len(self._fields)} arguments")
        values = dict(zip(self._fields, args, strict=False))  # positional ones first
        for name, value in kwargs.items():
            if name not in self._fields or name in values:
                raise TypeError(f"{type(self).__name__}: unexpected or repeated argument {name!r}")
            values[name] = value
        for name in self._fields:
            if name in values:
                value = values[name]
            elif name in self._defaults:
                value = self._defaults[name]
            else:
                raise TypeError(f"{type(self).__name__}: missing argument {name!r}")
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; use replace()")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(getattr(self, f) == getattr(other, f) for f in self._fields)

    __hash__ = None  # type: ignore[assignment]  # equal records may hold dicts

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({inner})"

    def replace(self, **changes: object):
        return type(self)(**{**{f: getattr(self, f) for f in self._fields}, **changes})
