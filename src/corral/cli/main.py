"""The `corral` command's Python entry point. `corral queue`, `submit`, `show` and `cancel` go to the user's
command helper when one answers (corral.slurm.front; the native front-end usually got there first and
exec'd this only because none did: this call then starts one for the next); their plain forms are
otherwise answered by corral.cli.lean_commands without loading Typer, click or httpx; everything else by the
Typer app in corral.cli.app (docs/decisions/0019-fast-commands.md, 0021-native-front-end.md). `app` is
importable from here, as before."""
from __future__ import annotations

import os
import sys


def main() -> None:
    from corral.slurm.front import CORRAL, CORRAL_SUBCOMMANDS, take_fallback_mark, through_helper  # only _socket

    argv = sys.argv[1:]
    fallback = take_fallback_mark()
    if argv and argv[0] in CORRAL_SUBCOMMANDS and not watching(argv):
        status = through_helper(CORRAL, argv, dict(os.environ), fallback)
        if status is not None:
            sys.exit(status)
    from corral.cli.lean_commands import run

    status = run(argv)
    if status is not None:
        sys.exit(status)
    from corral.cli.app import app

    app()


def watching(argv: list[str]) -> bool:
    """`corral queue --watch` (-w, or in a group such as -lw) runs until Ctrl-C, which it takes as its normal
    end (status 0); through the helper Ctrl-C would end the caller with 130, and so long a call gains nothing
    from a warm interpreter: it runs here (front.c's `watching` is the same rule)."""
    for arg in argv[1:]:
        if arg == "--":
            return False
        if arg == "--watch" or (arg.startswith("-") and not arg.startswith("--") and "w" in arg):
            return True
    return False


def __getattr__(name: str) -> object:
    if name == "app":  # the Typer app, loaded only when asked for (tests, completion)
        from corral.cli.app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
