"""Files written whole, with their mode from the start: no window in which a secret, a key or a
credential is readable by others, and no reader ever sees half a file. Standard library only."""
from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, data: bytes | str, mode: int = 0o600) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # O_CREAT's mode is masked by the umask; a reused tmp keeps its own
        with os.fdopen(fd, "wb") as handle:
            fd = -1
            handle.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    finally:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
