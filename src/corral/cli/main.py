"""The `corral` command. Its most-run forms (`corral queue`, `corral show`) are answered by
corral.cli.lean_commands without loading Typer, click or httpx; everything else by the Typer app in
corral.cli.app (docs/decisions/0019-fast-commands.md). `app` is importable from here, as before."""
from __future__ import annotations

import sys


def main() -> None:
    from corral.cli.lean_commands import run

    status = run(sys.argv[1:])
    if status is not None:
        sys.exit(status)
    from corral.cli.app import app

    app()


def __getattr__(name: str) -> object:
    if name == "app":  # the Typer app, loaded only when asked for (tests, completion)
        from corral.cli.app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
