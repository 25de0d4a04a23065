"""One help style for every `corral` command: click's plain layout, as `corral submit --help` prints its
own, with metavars that say what to give (URL, N, FILE) instead of Typer's Python types (<str>, <bool>).

Commands and groups made through `CorralApp` get it; an option without an explicit metavar gets its long
name in capitals (`--url` -> URL), as argparse names them."""
from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

# -h as Slurm's commands take it; help text up to 100 columns where the terminal has them (click's default: 80).
_CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
_WHOLE_SENTENCE = 10_000  # a short-help limit no first sentence reaches


def option_metavar(param: Any) -> str:
    """"" for a flag; else its metavar, or its long name in capitals."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    if param.metavar:
        return param.metavar
    long_names = [o for o in param.opts if o.startswith("--")] or param.opts
    return long_names[0].lstrip("-").replace("-", "_").upper()


def argument_metavar(param: Any) -> str:
    name = param.metavar or (param.name or "").upper()
    return f"{name}..." if param.nargs != 1 else name


def _usage_piece(param: Any) -> str:
    name = argument_metavar(param)
    return name if param.required else f"[{name}]"


def _default_text(param: Any) -> str:
    default = param.default
    if not param.show_default or default is None or getattr(param, "is_flag", False) or default in ((), []):
        return ""
    if isinstance(param.show_default, str):
        return f"  [default: {param.show_default}]"
    return f"  [default: {getattr(default, 'value', default)}]"


def _option_record(param: Any) -> tuple[str, str]:
    names = ", ".join(sorted(param.opts, key=lambda o: (o.startswith("--"), o)))
    if param.secondary_opts:
        names += " / " + ", ".join(param.secondary_opts)
    metavar = option_metavar(param)
    extra = _default_text(param) + ("  [required]" if param.required else "")
    return (f"{names} {metavar}" if metavar else names), (param.help or "") + extra


def format_params(command: Any, ctx: Any, formatter: Any) -> None:
    arguments, options = [], []
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "argument":
            arguments.append((argument_metavar(param), param.help or ""))
        elif param.param_type_name == "option":
            options.append(_option_record(param))
    if arguments:
        with formatter.section("Arguments"):
            formatter.write_dl(arguments)
    if options:
        with formatter.section("Options"):
            formatter.write_dl(options)


class CorralCommand(TyperCommand):
    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        return pieces + [_usage_piece(p) for p in self.get_params(ctx) if p.param_type_name == "argument"]

    def format_options(self, ctx: Any, formatter: Any) -> None:
        format_params(self, ctx, formatter)


class CorralGroup(TyperGroup):
    def format_options(self, ctx: Any, formatter: Any) -> None:
        format_params(self, ctx, formatter)
        self.format_commands(ctx, formatter)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """Each command's first sentence, wrapped rather than cut off with '...' as click does."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=_WHOLE_SENTENCE)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class CorralApp(typer.Typer):
    """A Typer app whose groups and commands print help in corral's style (and take -h as --help)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", CorralGroup)
        kwargs.setdefault("rich_markup_mode", None)
        kwargs.setdefault("context_settings", dict(_CONTEXT_SETTINGS))
        super().__init__(**kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", CorralCommand)
        return super().command(*args, **kwargs)
