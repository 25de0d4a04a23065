"""User names a test may use as people the host does not know: tests must not depend on which Unix users
the machine they run on happens to have (a host with a user named `alice` must not change a test's outcome)."""
from __future__ import annotations

import pwd


def absent_user(preferred: str) -> str:
    """`preferred`, or `preferred` with the smallest number appended, whichever this host has no user for."""
    candidates = (preferred if n == 0 else f"{preferred}{n}" for n in range(1000))
    for name in candidates:
        try:
            pwd.getpwnam(name)
        except KeyError:
            return name
    raise RuntimeError(f"every name from {preferred} to {preferred}999 is a user on this host")
